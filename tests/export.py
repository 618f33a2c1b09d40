#!/usr/bin/python3
"""python/fixformer_export.py against PyTorch and fixformer's reader.

  --engine E (runtime, tcc, cc): PyTorch modules, one per option the
      description expresses (an encoder post-norm; an encoder pre-norm gelu
      with a final norm and layer_norm_eps; nn.GELU(approximate="tanh"); no
      biases (torch 2's bias=False, or its parameters removed on 1.13); norms
      without weight and bias (elementwise_affine=False); a decoder-only LM
      wrapper with tied embeddings, sinusoidal positions and a causal mask;
      the same with a head bias on the tied head; an LM of an nn.ModuleList
      `layers` + `norm` with an untied head; an LM of RMSNorm and SwiGLU
      (fixformer_export.RMSNorm, .swiglu) with biases; an embedding and a
      stack returning hidden states (lm_head=False); BERT's embeddings
      (token with padding_idx, position and token-type tables, a LayerNorm:
      embed_norm, token_types) around an encoder; embeddings of max_norm
      (renormalised at lookup) with an untied head; an nn.Transformer
      wrapper with learned positions and an untied head with its bias; a
      lone layer; PyTorch's nn.Transformer tutorial model as written there,
      sequence-first) are exported with export() and run with `fixformer
      run`: the output must equal the module's own forward (eval mode)
      within 1e-4 scaled error over unpadded rows; with the runtime, `info
      --weights` says every tensor is ok.
  --check format: save_safetensors' bytes against the format spec, read by
      an independent parser here (sorted header, 8-byte alignment, values
      bit for bit, F16/BF16 kept, metadata), then by fixformer: `info
      --weights` ok and `run` bit-identical to the same weights written by
      tests/lib/reference.write_safetensors (F32, F16, BF16); atomic writes.
  --check errors: what fixformer cannot express is one ExportError naming
      the attribute (a norm outside the stack without embed_norm, even one
      without parameters; max_norm on a tied table); through the command line
      one stderr line, exit 1, no file; --embed-norm and --token-types; `weights` converts a torch.save'd state_dict (a tied head once).
  --check example: docs/importing.md's python/example_lm.py and `fixformer run` agree.

  export.py --fixformer BIN (--engine E | --check format|errors|example)
"""
import argparse
import copy
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
import fixformer_export as fx  # noqa: E402
from reference import lengths_mask, randomize, write_safetensors  # noqa: E402

EXPORTER = os.path.join(os.path.dirname(HERE), "python", "fixformer_export.py")
PY = "/usr/bin/python3"
torch.set_num_threads(1)


def sinusoidal(T, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), from the paper."""
    pe = torch.zeros(T, d)
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    div = torch.pow(10000.0, torch.arange(0, d, 2, dtype=torch.float64) / d)
    pe[:, 0::2] = torch.sin(pos / div).float()
    pe[:, 1::2] = torch.cos(pos / div[: d // 2]).float()
    return pe


def causal(T):
    return nn.Transformer.generate_square_subsequent_mask(T)


# ---- the modules, each with its own forward ------------------------------------

class TiedLM(nn.Module):
    """Decoder-only: embedding * sqrt(d) + a sinusoidal buffer, nn.TransformerEncoder
    with a causal mask, a head tied to the embedding (same Parameter), with a
    bias of its own when head_bias."""

    def __init__(self, V, d, h, ff, L, head_bias=False):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.register_buffer("pe", sinusoidal(32, d))  # a buffer: not a weight fixformer reads
        layer = nn.TransformerEncoderLayer(d, h, ff, 0.0, batch_first=True)
        self.stack = nn.TransformerEncoder(layer, L, enable_nested_tensor=False)
        self.lm_head = nn.Linear(d, V, bias=head_bias)
        self.lm_head.weight = self.embed.weight
        self.d = d

    def forward(self, ids, lengths):
        T = ids.shape[1]
        x = self.embed(ids) * math.sqrt(self.d) + self.pe[:T]
        x = self.stack(x, mask=causal(T), src_key_padding_mask=lengths_mask(lengths, T))
        return self.lm_head(x)


class ListLM(nn.Module):
    """Decoder-only: unscaled embedding, nn.ModuleList `layers` (pre-norm, gelu),
    final `norm`, an untied head; layer(d) and norm(d) make others."""

    def __init__(self, V, d, h, ff, L, layer=None, norm=nn.LayerNorm):
        super().__init__()
        self.tok = nn.Embedding(V, d)
        self.layers = nn.ModuleList([layer(d) if layer else nn.TransformerEncoderLayer(
            d, h, ff, 0.0, activation="gelu", batch_first=True, norm_first=True) for _ in range(L)])
        self.norm = norm(d)
        self.head = nn.Linear(d, V, bias=False)

    def forward(self, ids, lengths):
        T = ids.shape[1]
        x = self.tok(ids)
        for layer in self.layers:
            x = layer(x, src_mask=causal(T), src_key_padding_mask=lengths_mask(lengths, T))
        return self.head(self.norm(x))


def rms_swiglu_layer(h, ff):
    """A pre-norm layer of fixformer_export.RMSNorm (eps 1e-6) and
    fixformer_export.swiglu (linear1 [2 d_ff, d] as gate | up, linear2 [d,
    d_ff]), with biases."""
    def make(d):
        layer = nn.TransformerEncoderLayer(d, h, 2 * ff, 0.0, activation=fx.swiglu, batch_first=True, norm_first=True)
        layer.linear2 = nn.Linear(ff, d)
        layer.norm1, layer.norm2 = fx.RMSNorm(d, eps=1e-6), fx.RMSNorm(d, eps=1e-6)
        return layer
    return make


class Hidden(nn.Module):
    """An embedding * sqrt(d) and an encoder whose forward returns the hidden
    states, no head (BERT's encoder output): lm_head=False."""

    def __init__(self, V, d, h, ff, L):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, ff, 0.0, batch_first=True), L,
                                             enable_nested_tensor=False)
        self.d = d

    def forward(self, ids, lengths):
        return self.encoder(self.embed(ids) * math.sqrt(self.d),
                            src_key_padding_mask=lengths_mask(lengths, ids.shape[1]))


class BertLike(nn.Module):
    """BERT's embeddings around an encoder (post-norm, gelu, eps 1e-12): token
    (padding_idx 0, which changes only gradients), learned position and
    token-type embeddings summed unscaled, every token_type_id 0, then a
    LayerNorm; hidden states out (embed_norm, token_types, lm_head=False)."""

    def __init__(self, V, d, h, ff, L, max_seq):
        super().__init__()
        self.word = nn.Embedding(V, d, padding_idx=0)
        self.pos_embed = nn.Embedding(max_seq, d)
        self.token_type = nn.Embedding(2, d)
        self.embed_ln = nn.LayerNorm(d, eps=1e-12)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, ff, 0.0, activation="gelu",
                                                                        batch_first=True, layer_norm_eps=1e-12),
                                             L, enable_nested_tensor=False)

    def forward(self, ids, lengths):
        T = ids.shape[1]
        x = self.word(ids) + self.pos_embed(torch.arange(T)) + self.token_type(torch.zeros_like(ids))
        return self.encoder(self.embed_ln(x), src_key_padding_mask=lengths_mask(lengths, T))


class MaxNormLM(nn.Module):
    """Decoder-only with token and learned-position embeddings of max_norm
    (forward renormalises each row it looks up, in place; positions in the
    3-norm), scaled, pre-norm layers, an untied head with its bias."""

    def __init__(self, V, d, h, ff, L, max_seq):
        super().__init__()
        self.embed = nn.Embedding(V, d, max_norm=1.5)
        self.pos_embed = nn.Embedding(max_seq, d, max_norm=0.5, norm_type=3.0)
        self.stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(d, h, ff, 0.0, batch_first=True,
                                                                      norm_first=True), L, enable_nested_tensor=False)
        self.head = nn.Linear(d, V)
        self.d = d

    def forward(self, ids, lengths):
        T = ids.shape[1]
        x = self.embed(ids) * math.sqrt(self.d) + self.pos_embed(torch.arange(T))
        return self.head(self.stack(x, mask=causal(T), src_key_padding_mask=lengths_mask(lengths, T)))


def encoder_layer(*args, bias=True, **kw):
    """nn.TransformerEncoderLayer; bias=False: torch 2's (projections and norms without
    biases), or on torch 1.13, which has none, the same layer with those parameters removed."""
    if bias:
        return nn.TransformerEncoderLayer(*args, **kw)
    try:
        return nn.TransformerEncoderLayer(*args, bias=False, **kw)
    except TypeError:
        layer = nn.TransformerEncoderLayer(*args, **kw)
        layer.self_attn.register_parameter("in_proj_bias", None)
        for m in (layer.self_attn.out_proj, layer.linear1, layer.linear2, layer.norm1, layer.norm2):
            m.register_parameter("bias", None)
        return layer


def plain_norms(layer, d):
    """The layer's norms as LayerNorm(elementwise_affine=False): no weight, no bias."""
    layer.norm1, layer.norm2 = nn.LayerNorm(d, elementwise_affine=False), nn.LayerNorm(d, elementwise_affine=False)
    return layer


class Seq2Seq(nn.Module):
    """nn.Transformer with one shared embedding * sqrt(d) + learned positions,
    and an nn.Linear head with its bias."""

    def __init__(self, V, d, h, ff, Le, Ld, max_seq):
        super().__init__()
        self.embed = nn.Embedding(V, d)
        self.pos_embed = nn.Embedding(max_seq, d)
        self.transformer = nn.Transformer(d, h, Le, Ld, ff, 0.0, activation="gelu", batch_first=True)
        self.transformer.encoder.enable_nested_tensor = False  # DESIGN.md, pitfalls
        self.out = nn.Linear(d, V)
        self.d = d

    def embed_at(self, ids):
        return self.embed(ids) * math.sqrt(self.d) + self.pos_embed(torch.arange(ids.shape[1]))

    def forward(self, src, lengths, tgt):
        pad = lengths_mask(lengths, src.shape[1])
        y = self.transformer(self.embed_at(src), self.embed_at(tgt), tgt_mask=causal(tgt.shape[1]),
                             src_key_padding_mask=pad, memory_key_padding_mask=pad)
        return self.out(y)


class TutorialLM(nn.Module):
    """PyTorch's own nn.Transformer language-model tutorial, as written there:
    sequence-first, self.encoder = nn.Embedding, a PositionalEncoding module
    (dropout + a sinusoidal buffer [max_len, 1, d]), self.transformer_encoder,
    self.decoder = nn.Linear with its bias (zeroed by init_weights, perturbed
    here as training would)."""

    class PositionalEncoding(nn.Module):
        def __init__(self, d, max_len=64):
            super().__init__()
            self.dropout = nn.Dropout(0.1)
            position = torch.arange(max_len).unsqueeze(1)
            div_term = torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
            pe = torch.zeros(max_len, 1, d)
            pe[:, 0, 0::2] = torch.sin(position * div_term)
            pe[:, 0, 1::2] = torch.cos(position * div_term)
            self.register_buffer("pe", pe)

        def forward(self, x):
            return self.dropout(x + self.pe[:x.size(0)])

    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers):
        super().__init__()
        self.pos_encoder = self.PositionalEncoding(d_model)
        self.transformer_encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(d_model, nhead, d_hid, 0.1),
                                                         nlayers)
        self.encoder = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.decoder = nn.Linear(d_model, ntoken)
        self.encoder.weight.data.uniform_(-0.1, 0.1)
        self.decoder.bias.data.zero_()
        self.decoder.weight.data.uniform_(-0.1, 0.1)

    def forward(self, src, src_mask):
        src = self.encoder(src) * math.sqrt(self.d_model)
        return self.decoder(self.transformer_encoder(self.pos_encoder(src), src_mask))


def perturbed(module, seed):
    gen = torch.Generator().manual_seed(seed)
    randomize(module, gen)  # every norm and bias, the heads' too
    return module.eval()


def cases():
    """(name, module, export options, inputs dict, expected output)."""
    out = []
    gen = torch.Generator().manual_seed(7)
    lengths = torch.tensor([6, 3, 1])

    torch.manual_seed(1)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(24, 3, 37, 0.0, batch_first=True), 2,
                                enable_nested_tensor=False)
    x = torch.randn(3, 6, 24, generator=gen)
    out.append(("enc_post", perturbed(enc, 1), {}, dict(x=x, lengths=lengths),
                lambda m, a: m(a["x"], src_key_padding_mask=lengths_mask(a["lengths"], 6))))

    torch.manual_seed(2)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 40, 0.0, activation="gelu", batch_first=True,
                                                           norm_first=True, layer_norm_eps=1e-6), 3,
                                norm=nn.LayerNorm(16, eps=1e-6), enable_nested_tensor=False)
    x = torch.randn(3, 6, 16, generator=gen)
    out.append(("enc_pre_gelu_final", perturbed(enc, 2), {}, dict(x=x, lengths=lengths),
                lambda m, a: m(a["x"], src_key_padding_mask=lengths_mask(a["lengths"], 6))))

    # odd heads: torch 1.13's fast path of an encoder layer in eval mode reads biases these layers lack
    torch.manual_seed(8)
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(24, 3, 40, 0.0, activation=nn.GELU(approximate="tanh"),
                                                           batch_first=True), 2, enable_nested_tensor=False)
    x = torch.randn(3, 6, 24, generator=gen)
    out.append(("enc_gelu_tanh", perturbed(enc, 8), {}, dict(x=x, lengths=lengths),
                lambda m, a: m(a["x"], src_key_padding_mask=lengths_mask(a["lengths"], 6))))

    torch.manual_seed(9)
    enc = nn.TransformerEncoder(encoder_layer(24, 3, 40, 0.0, batch_first=True, norm_first=True, bias=False), 2,
                                norm=nn.LayerNorm(24), enable_nested_tensor=False)
    if enc.norm.bias is not None and enc.layers[0].norm1.bias is None:  # torch 1.13: as torch 2's bias=False
        enc.norm.register_parameter("bias", None)
    out.append(("enc_no_bias", perturbed(enc, 9), {}, dict(x=x, lengths=lengths),
                lambda m, a: m(a["x"], src_key_padding_mask=lengths_mask(a["lengths"], 6))))

    torch.manual_seed(10)
    enc = nn.TransformerEncoder(plain_norms(nn.TransformerEncoderLayer(24, 3, 40, 0.0, batch_first=True), 24), 2,
                                norm=nn.LayerNorm(24, elementwise_affine=False), enable_nested_tensor=False)
    out.append(("enc_plain_norms", perturbed(enc, 10), {}, dict(x=x, lengths=lengths),
                lambda m, a: m(a["x"], src_key_padding_mask=lengths_mask(a["lengths"], 6))))

    torch.manual_seed(3)
    ids = torch.randint(0, 50, (3, 7), generator=gen)
    lm_lengths = torch.tensor([7, 4, 2])
    out.append(("tied_lm", perturbed(TiedLM(50, 24, 4, 48, 2), 3),
                dict(arch="decoder-only", positional="sinusoidal", max_seq=32),
                dict(ids=ids, lengths=lm_lengths), lambda m, a: m(a["ids"], a["lengths"])))

    torch.manual_seed(11)
    out.append(("tied_lm_head_bias", perturbed(TiedLM(50, 24, 4, 48, 2, head_bias=True), 11),
                dict(arch="decoder-only", positional="sinusoidal", max_seq=32),
                dict(ids=ids, lengths=lm_lengths), lambda m, a: m(a["ids"], a["lengths"])))

    torch.manual_seed(4)
    out.append(("list_lm", perturbed(ListLM(40, 16, 2, 24, 2), 4),
                dict(arch="decoder-only", scale_embeddings=False, max_seq=16),
                dict(ids=ids % 40, lengths=lm_lengths), lambda m, a: m(a["ids"], a["lengths"])))

    torch.manual_seed(12)
    rms_lm = ListLM(40, 16, 2, 20, 2, layer=rms_swiglu_layer(2, 20), norm=lambda d: fx.RMSNorm(d, eps=1e-6))
    out.append(("rms_swiglu_lm", perturbed(rms_lm, 12),
                dict(arch="decoder-only", scale_embeddings=False, max_seq=16),
                dict(ids=ids % 40, lengths=lm_lengths), lambda m, a: m(a["ids"], a["lengths"])))

    torch.manual_seed(13)
    out.append(("hidden_states", perturbed(Hidden(40, 16, 2, 24, 2), 13), dict(lm_head=False, max_seq=16),
                dict(ids=ids % 40, lengths=lm_lengths), lambda m, a: m(a["ids"], a["lengths"])))

    torch.manual_seed(14)
    out.append(("bert_like", perturbed(BertLike(40, 16, 2, 24, 2, 12), 14),
                dict(lm_head=False, scale_embeddings=False, embed_norm=True, token_types=True),
                dict(ids=ids % 40, lengths=lm_lengths), lambda m, a: m(a["ids"], a["lengths"])))

    torch.manual_seed(15)
    # forward on a copy: the exported module's rows are as trained, not as these lookups left them
    out.append(("max_norm_lm", perturbed(MaxNormLM(40, 16, 2, 24, 2, 12), 15), dict(arch="decoder-only"),
                dict(ids=ids % 40, lengths=lm_lengths), lambda m, a: copy.deepcopy(m)(a["ids"], a["lengths"])))

    torch.manual_seed(5)
    src, tgt = torch.randint(0, 30, (3, 6), generator=gen), torch.randint(0, 30, (3, 5), generator=gen)
    out.append(("seq2seq", perturbed(Seq2Seq(30, 16, 2, 32, 2, 1, 12), 5), {},
                dict(ids=src, lengths=torch.tensor([6, 2, 5]), tgt=tgt),
                lambda m, a: m(a["ids"], a["lengths"], a["tgt"])))

    torch.manual_seed(7)
    full = torch.tensor([5, 5])
    out.append(("tutorial_lm", perturbed(TutorialLM(33, 16, 2, 20, 2), 7),
                dict(arch="decoder-only", positional="sinusoidal", max_seq=64),
                dict(ids=ids[:2, :5] % 33, lengths=full),
                lambda m, a: m(a["ids"].T, causal(a["ids"].shape[1])).transpose(0, 1)))

    torch.manual_seed(6)
    layer = nn.TransformerEncoderLayer(8, 2, 12, 0.0, batch_first=True)
    x = torch.randn(2, 4, 8, generator=gen)
    out.append(("lone_layer", perturbed(layer, 6), {}, dict(x=x, lengths=torch.tensor([4, 3])),
                lambda m, a: m(a["x"], src_key_padding_mask=lengths_mask(a["lengths"], 4))))
    return out


def ff(args, *argv, env=None):
    p = subprocess.run([args.fixformer] + list(argv), capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise AssertionError("fixformer %s: exit %d: %s" % (" ".join(argv), p.returncode, p.stderr.strip()))
    return p.stdout


def check_engine(args, tmp):
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))  # a private cc cache
    worst = 0.0
    for name, module, opts, inputs, forward in cases():
        with torch.no_grad():
            expected = forward(module, inputs).numpy()
        lua = fx.export(module, os.path.join(tmp, name), name, **opts)
        folder = os.path.dirname(lua)
        weights = os.path.join(folder, name + ".safetensors")
        flags = []
        for key, flag in (("x", "--input"), ("ids", "--input"), ("lengths", "--lengths"), ("tgt", "--target-input")):
            if key in inputs:
                a = inputs[key].numpy()
                path = os.path.join(folder, key + ".npy")
                np.save(path, a.astype(np.float32 if a.dtype.kind == "f" else np.int32))
                flags += [flag, path]
        got_path = os.path.join(folder, "out.npy")
        ff(args, "run", lua, *flags, "--output", got_path, "--engine", args.engine, env=env)
        got = np.load(got_path)
        assert got.shape == expected.shape, (name, got.shape, expected.shape)
        T = expected.shape[1]
        rows = np.ones(expected.shape[:2], bool) if "tgt" in inputs else \
            np.arange(T)[None, :] < inputs["lengths"].numpy()[:, None]
        err = np.abs(got[rows] - expected[rows]).max() / np.abs(expected[rows]).max()
        print("%-20s %-8s scaled error %.2e" % (name, args.engine, err))
        assert err <= 1e-4, "%s: %s differs from the PyTorch module by %.3e" % (name, args.engine, err)
        worst = max(worst, err)
        if args.engine == "runtime":
            report = ff(args, "info", lua, "--weights", weights)
            assert "-- ok:" in report, report
            n = sum(1 for line in report.splitlines() if line.rstrip().endswith(" ok"))
            assert n == len(read_spec(weights)[0]) - ("__metadata__" in read_spec(weights)[0]), (name, n)
    print("all %d modules within 1e-4 on %s (worst %.2e)" % (len(cases()), args.engine, worst))


# ---- the file format ---------------------------------------------------------

def read_spec(path):
    """An independent reader of the format: (header dict, data bytes), checking
    the layout as it goes."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    assert n % 8 == 0, "header length %d not a multiple of 8" % n
    text = raw[8:8 + n]
    assert text[:1] == b"{" and text.rstrip(b" ").endswith(b"}"), "header is not one padded JSON object"
    header = json.loads(text.decode("utf-8"))
    data = raw[8 + n:]
    names = [k for k in header if k != "__metadata__"]
    assert names == sorted(names), "names not sorted: %s" % names
    end = 0
    for k in names:
        a, b = header[k]["data_offsets"]
        assert a >= end and a % 8 == 0 and b <= len(data), (k, a, b, end)
        end = b
    assert len(data) - end < 8, "trailing bytes after the last tensor"
    return header, data


NP = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BF16": "<u2"}


def check_format(args, tmp):
    gen = torch.Generator().manual_seed(3)
    tensors = {
        "b.weight": torch.randn(5, 3, generator=gen),
        "a.half": torch.randn(3, generator=gen).half(),  # 6 bytes: the next tensor must be padded to 8
        "c.bf16": torch.randn(2, 7, generator=gen).to(torch.bfloat16),
        "d.double": torch.randn(4, generator=gen, dtype=torch.float64),
        "e.ids": torch.arange(5, dtype=torch.int64),
        "f.scalar": torch.tensor(2.5),
        "g.numpy": np.arange(6, dtype=np.float32).reshape(2, 3),
        "h.empty": torch.zeros(0, 4),
        "i.view": torch.randn(4, 6, generator=gen)[:, 1:3],  # not contiguous
    }
    for dtype in ("F32", "keep", "F16", "BF16"):
        path = os.path.join(tmp, "fmt_%s.safetensors" % dtype)
        fx.save_safetensors(tensors, path, dtype=dtype, metadata={"format": "pt"})
        header, data = read_spec(path)
        assert header["__metadata__"] == {"format": "pt"}, header
        for k, v in tensors.items():
            t = torch.from_numpy(v) if isinstance(v, np.ndarray) else v
            if t.is_floating_point():
                want = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype] \
                    if dtype != "keep" else (t.dtype if t.dtype in (torch.float16, torch.bfloat16) else torch.float32)
                t = t.to(want)
            name = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}[t.dtype]
            info = header[k]
            assert info["dtype"] == name and info["shape"] == list(t.shape), (dtype, k, info)
            a, b = info["data_offsets"]
            got = np.frombuffer(data[a:b], dtype=NP[name])
            want_bits = (t.view(torch.int16).numpy().view("<u2") if name == "BF16" else t.numpy()).reshape(-1)
            assert got.tobytes() == want_bits.astype(NP[name]).tobytes(), (dtype, k)
    emb = torch.randn(4, 2, generator=gen)
    both = {"embed.weight": emb, "lm_head.weight": emb, "other": emb.clone()}
    path = os.path.join(tmp, "tied.safetensors")
    assert fx.tied_aliases(both) == {"lm_head.weight": "embed.weight"}
    fx.save_safetensors(both, path, tied="drop")
    assert sorted(read_spec(path)[0]) == ["embed.weight", "other"]
    fx.save_safetensors(both, path)
    assert sorted(read_spec(path)[0]) == ["embed.weight", "lm_head.weight", "other"]
    print("format: header, order, alignment and values as the spec says (F32, keep, F16, BF16); tied names")

    # fixformer's reader: a model's weights through save_safetensors and through the tests' own writer
    torch.manual_seed(9)
    model = perturbed(TiedLM(20, 16, 2, 24, 2), 9)
    lua = fx.export(model, os.path.join(tmp, "rt"), "rt", arch="decoder-only", positional="sinusoidal",
                    max_seq=32)
    folder = os.path.dirname(lua)
    _, tensors = fx.describe_config(model, "rt", arch="decoder-only", positional="sinusoidal", max_seq=32)
    as_numpy = {k: v.detach().numpy() for k, v in tensors.items()}
    np.save(os.path.join(folder, "ids.npy"), np.array([[1, 5, 7, 3], [2, 2, 9, 0]], np.int32))
    for dtype in ("F32", "F16", "BF16"):
        ours, theirs = (os.path.join(folder, "%s_%s.safetensors" % (who, dtype)) for who in ("ours", "theirs"))
        fx.save_safetensors(tensors, ours, dtype=dtype)
        write_safetensors(theirs, as_numpy, dtype=dtype)
        report = ff(args, "info", lua, "--weights", ours)
        assert "-- ok:" in report and (" %s " % dtype) in report, report
        outs = []
        for w in (ours, theirs):
            o = os.path.join(folder, "out_%s_%s.npy" % (dtype, os.path.basename(w)[:4]))
            ff(args, "run", lua, "--weights", w, "--input", os.path.join(folder, "ids.npy"), "--output", o)
            outs.append(np.load(o))
        assert outs[0].tobytes() == outs[1].tobytes(), "%s: fixformer reads other values from our file" % dtype
    print("format: fixformer reads save_safetensors' F32/F16/BF16 files as the tests' own writer's, bit for bit")

    # atomic: a failed write leaves the old file and no temporary
    path = os.path.join(tmp, "atomic", "w.safetensors")
    os.makedirs(os.path.dirname(path))
    fx.save_safetensors({"x": torch.ones(2)}, path)
    before = open(path, "rb").read()
    try:
        fx.save_safetensors({"x": torch.ones(2), "y": torch.ones(2, dtype=torch.complex64)}, path)
        raise AssertionError("a complex tensor was written")
    except fx.ExportError as e:
        assert "'y'" in str(e), e
    assert open(path, "rb").read() == before and os.listdir(os.path.dirname(path)) == ["w.safetensors"]
    print("format: a failed write leaves the earlier file and no temporary")


# ---- what fixformer cannot express -------------------------------------------

def expect_error(module, pieces, **opts):
    try:
        fx.describe(module, name="m", **opts)
    except fx.ExportError as e:
        msg = str(e)
        assert "\n" not in msg and all(p in msg for p in pieces), "message %r lacks %s" % (msg, pieces)
        print("refused: %s" % msg)
        return
    raise AssertionError("no error for %s" % pieces)


class WithClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1, enable_nested_tensor=False)
        self.classifier = nn.LayerNorm(8)


class BiasedHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 8)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1, enable_nested_tensor=False)
        self.decoder = nn.Linear(8, 10)  # the nn.Transformer tutorial's head, with a trained bias


def check_errors(args, tmp):
    layer = nn.TransformerEncoderLayer(8, 2, 16, activation=torch.tanh)
    expect_error(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False),
                 ["layers.0.activation", "tanh", "custom activation"])
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    layer.self_attn = nn.MultiheadAttention(8, 2, kdim=4, vdim=4)
    expect_error(nn.TransformerEncoder(layer, 1, enable_nested_tensor=False), ["layers.0.self_attn.kdim", "4"])
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    layer.self_attn.out_proj.register_parameter("bias", None)  # in_proj_bias stays
    expect_error(nn.TransformerEncoder(layer, 1, enable_nested_tensor=False),
                 ["layers.0.self_attn.out_proj.bias", "absent", "in_proj_bias"])
    expect_error(nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, 16), 1), ["TransformerDecoder", "encoder"])
    expect_error(WithClassifier(), ["classifier", "LayerNorm"])
    plain = WithClassifier()  # a norm without parameters is a norm too: refused, not left out
    plain.classifier = nn.LayerNorm(8, elementwise_affine=False)
    expect_error(plain, ["classifier", "LayerNorm", "embed_norm=True"])
    hidden = Hidden(10, 8, 2, 16, 1)
    expect_error(hidden, ["embed_norm", "no norm"], lm_head=False, embed_norm=True)
    expect_error(hidden, ["token_types", "*type*"], lm_head=False, token_types=True)
    bert = BertLike(10, 8, 2, 16, 1, 6)
    expect_error(bert, ["token_type", "second token embedding", "token_types=True"], lm_head=False, embed_norm=True)
    bert.extra_ln = nn.LayerNorm(8)
    expect_error(bert, ["embed_norm", "2 norms", "embed_ln", "extra_ln"], lm_head=False, embed_norm=True,
                 token_types=True)
    tied = TiedLM(20, 8, 2, 16, 1)
    tied.embed.max_norm = 1.0  # the head reads rows as the lookups so far left them
    expect_error(tied, ["embed.max_norm", "tied head"], arch="decoder-only", positional="sinusoidal")
    with torch.no_grad():
        head = BiasedHead()
        head.decoder.bias.fill_(0.5)
    text = fx.describe(head, name="m")  # the description's head_bias (run by --engine: tied_lm_head_bias, seq2seq)
    assert "head_bias        = true," in text and 'lm_head_bias     = "decoder.bias",' in text, text
    expect_error(head, ["decoder", "lm_head=False"], lm_head=False)
    expect_error(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1, enable_nested_tensor=False),
                 ["positional", "rotary"], positional="rope")
    mixed = nn.ModuleList([nn.TransformerEncoderLayer(8, 2, 16), nn.TransformerEncoderLayer(8, 2, 24)])
    expect_error(nn.ModuleDict({"layers": mixed}), ["layers.1", "d_ff 24", "16"])
    expect_error(nn.ModuleDict({"enc": nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2), 1),
                                "dec": nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2), 1)}),
                 ["PREFIX.encoder", "'enc'", "'dec'"])
    two = nn.ModuleDict({"src_embed": nn.Embedding(5, 8), "tgt_embed": nn.Embedding(5, 8),
                         "transformer": nn.Transformer(8, 2, 1, 1, 16)})
    expect_error(two, ["tgt_embed", "second token embedding"], tie_embeddings=True)
    mixed_norms = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16), 1, norm=fx.RMSNorm(8))
    expect_error(mixed_norms, ["norm", "rmsnorm", "layernorm", "one kind"])
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    layer.norm2 = nn.GroupNorm(1, 8)
    expect_error(nn.TransformerEncoder(layer, 1, enable_nested_tensor=False),
                 ["layers.0.norm2", "GroupNorm", "RMSNorm"])
    expect_error(nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, activation=fx.swiglu), 1,
                                       enable_nested_tensor=False), ["layers.0.linear2", "swiglu", "half"])

    # the command line: one line, exit 1, nothing written
    src = os.path.join(tmp, "bad_model.py")
    with open(src, "w") as f:
        f.write("import torch, torch.nn as nn\n"
                "def build():\n"
                "    return nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, activation=torch.tanh), 1,\n"
                "                                 enable_nested_tensor=False)\n")
    out = os.path.join(tmp, "bad_out")
    p = subprocess.run([PY, EXPORTER, "module", src + ":build", "-o", out, "--name", "m"], capture_output=True,
                       text=True)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and "layers.0.activation" in lines[0], (p.returncode, p.stderr)
    assert not os.path.exists(out) or not os.listdir(out), os.listdir(out)
    print("refused on the command line: %s" % lines[0])

    # the options forward() decides, on the command line too
    src = os.path.join(tmp, "bert_model.py")
    with open(src, "w") as f:
        f.write("import sys\nsys.path.insert(0, %r)\nimport export\n"
                "def build():\n    return export.BertLike(10, 8, 2, 16, 1, 6)\n" % HERE)
    p = subprocess.run([PY, EXPORTER, "describe", src + ":build", "--name", "bert", "--no-lm-head",
                        "--no-scale-embeddings", "--embed-norm", "--token-types"], capture_output=True, text=True)
    assert p.returncode == 0 and "embed_norm" in p.stdout and "token_types             = 2," in p.stdout and \
        'token_type_embed_weight = "token_type.weight",' in p.stdout, (p.returncode, p.stdout, p.stderr)
    print("described on the command line: --embed-norm --token-types")

    # a pickled module (not a state_dict) given to `weights`: one line, nothing written
    pt = os.path.join(tmp, "whole.pt")
    torch.save(nn.Linear(2, 2), pt)
    dst = os.path.join(tmp, "whole.safetensors")
    p = subprocess.run([PY, EXPORTER, "weights", pt, "-o", dst], capture_output=True, text=True)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 1 and len(lines) == 1 and "not a state_dict of tensors" in lines[0], p.stderr
    assert not os.path.exists(dst)
    print("refused on the command line: %s" % lines[0])

    # and the good path of `weights`: a torch.save'd state_dict, which fixformer refuses, converts; a tied
    # head (torch.save keeps the sharing) is written once, under the embedding's name
    model = perturbed(TiedLM(20, 8, 2, 16, 1), 11)
    pt = os.path.join(tmp, "lm.pt")
    sd = model.state_dict()
    del sd["pe"]  # `weights` converts every tensor it is given: a buffer would be one too many
    torch.save(sd, pt)
    lua = os.path.join(tmp, "lm.lua")
    with open(lua, "w") as f:
        f.write(fx.describe(model, name="lm", arch="decoder-only", positional="sinusoidal"))
    p = subprocess.run([args.fixformer, "info", lua, "--weights", pt], capture_output=True, text=True)
    assert p.returncode == 1 and "python/fixformer_export.py weights" in p.stderr, p.stderr
    dst = os.path.join(tmp, "lm.safetensors")
    p = subprocess.run([PY, EXPORTER, "weights", pt, "-o", dst], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == dst, p.stderr
    assert "lm_head.weight is embed.weight (tied)" in p.stderr, p.stderr
    assert "-- ok:" in ff(args, "info", lua, "--weights", dst)
    p = subprocess.run([PY, EXPORTER, "weights", pt, "-o", dst, "--keep-tied"], capture_output=True, text=True)
    assert p.returncode == 0 and "lm_head.weight" in read_spec(dst)[0], p.stderr
    p = subprocess.run([PY, EXPORTER, "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "weights" in p.stdout and "module" in p.stdout, p.stdout
    print("weights: a torch.save'd state_dict converts and checks ok; --help works")


def check_example(args, tmp):
    """docs/importing.md "From PyTorch": python/example_lm.py, then `fixformer run --tokens`: the same argmax."""
    out = os.path.join(tmp, "lm")
    p = subprocess.run([PY, os.path.join(os.path.dirname(EXPORTER), "example_lm.py"), out], capture_output=True,
                       text=True, check=True)
    lines = p.stdout.strip().splitlines()
    assert lines[-1] == os.path.join(out, "lm.lua") and lines[0].startswith("PyTorch argmax: "), lines
    torch_ids = lines[0].split(": ")[1]
    for engine in ("runtime", "tcc"):
        got = ff(args, "run", lines[-1], "--tokens", "5 17 42 8 8 3", "--engine", engine)
        assert got.startswith("sequence 0: %s " % torch_ids), (engine, got, torch_ids)
    print("example: PyTorch and fixformer (runtime, tcc) argmax %s" % torch_ids)
    # the same through the command line: files written, the .lua's path on the last line
    out2 = os.path.join(tmp, "lm2")
    p = subprocess.run([PY, EXPORTER, "module", os.path.join(os.path.dirname(EXPORTER), "example_lm.py") + ":LM",
                        "-o", out2, "--name", "lm", "--arch", "decoder-only"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip().splitlines()[-1] == os.path.join(out2, "lm.lua"), p.stderr
    assert sorted(os.listdir(out2)) == ["lm.lua", "lm.safetensors"], os.listdir(out2)
    assert "-- ok:" in ff(args, "info", os.path.join(out2, "lm.lua"), "--weights", os.path.join(out2, "lm.safetensors"))
    print("example: fixformer_export.py module writes lm.lua + lm.safetensors, info --weights ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--engine", choices=["runtime", "tcc", "cc"])
    ap.add_argument("--check", choices=["format", "errors", "example"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ff-export-") as tmp:
        if args.check == "format":
            check_format(args, tmp)
        elif args.check == "errors":
            check_errors(args, tmp)
        elif args.check == "example":
            check_example(args, tmp)
        else:
            args.engine = args.engine or "runtime"
            check_engine(args, tmp)


if __name__ == "__main__":
    main()
