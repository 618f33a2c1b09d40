"""The PyTorch side of the reference tests: file writers and RefModel, a
plain-torch transformer that implements every option of the description
contract (docs/model-description.md, "What the runtime computes") independently of the C code.

RefModel is itself checked against torch.nn.TransformerEncoder /
nn.Transformer in torch_parity.py before it is trusted with the options
PyTorch has no module for (RMSNorm, RoPE, SwiGLU, learned positions)."""
import json
import os
import re
import math
import struct

import numpy as np
import torch
import torch.nn.functional as F

import configs

# ---- kinds folded into a linear (include/ff_schema.h FF_WEIGHT_FOLDS: LayerScale), from the schema --------

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python",
                       "fixformer_schema.json")) as _f:
    SCHEMA = json.load(_f)
FOLDS = [w for w in SCHEMA["weights"] if "folds_into" in w]  # each a scale of its linear's output channels


def needs_hold(c, needs):
    """Whether the schema's conditions `needs` hold for a config with its defaults (RefModel's c)."""
    conds = {k["name"]: k for k in SCHEMA["conditions"]}
    tests = {"set": lambda v, w: bool(v), "true": lambda v, w: v is True, "false": lambda v, w: v is False,
             "is": lambda v, w: v == w}
    return all(tests[conds[n]["test"]](c.get(conds[n]["key"]), conds[n].get("value")) for n in needs)


def fold_scales(weights, c, name):
    """The scale folded into the linear of weight `name` (its layer's tensor of a FOLDS role), or None."""
    for k in FOLDS:
        role = k["folds_into"]["weight"]
        if name.endswith(role) and needs_hold(c, k["needs"]):
            return weights.get(name[:-len(role)] + k["role"])
    return None


# ---- files ---------------------------------------------------------------

def write_safetensors(path, tensors, dtype="F32", metadata=None):
    """tensors: name -> array; written in sorted name order as F32, F16 or
    BF16 (rounded to nearest even, as torch converts); metadata: the
    __metadata__ dict of strings, if any."""
    header, offset, blobs = ({"__metadata__": metadata} if metadata else {}), 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name], dtype="<f4"))
        if dtype == "F16":
            raw = a.astype("<f2").tobytes()
        elif dtype == "BF16":
            raw = torch.from_numpy(a.copy()).to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            raw = a.tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """name -> float32 array, for a file of F32 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    out = {}
    for name, info in json.loads(raw[8:8 + n]).items():
        if name == "__metadata__":
            continue
        assert info["dtype"] == "F32", (path, name, info["dtype"])
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype="<f4").reshape(info["shape"]).copy()
    return out


def weights_distance(got, want, d):
    """Two trainings' weights apart: max over tensors of max |a - b| / max |b| (max |b| at least 1e-3 of the
    largest weight) and where, the key rows of in_proj_bias aside (their gradient is rounding noise: softmax
    ignores a shift of all scores); and those rows' largest difference.  d: d_model."""
    floor = 1e-3 * max(float(np.abs(w).max()) for w in want.values())
    worst, keys = (0.0, ""), 0.0
    for name, b in want.items():
        a = got[name]
        if name.endswith("in_proj_bias"):
            keys = max(keys, float(np.abs(a[d:2 * d] - b[d:2 * d]).max()))
            a, b = np.delete(a, np.s_[d:2 * d]), np.delete(b, np.s_[d:2 * d])
        worst = max(worst, (float(np.abs(a - b).max()) / max(float(np.abs(b).max()), floor), name))
    return worst, keys


def rounded(tensors, dtype):
    """The float32 values a reader gets back from write_safetensors(.., dtype)."""
    if dtype == "F16":
        return {k: np.asarray(v, np.float32).astype(np.float16).astype(np.float32) for k, v in tensors.items()}
    if dtype == "BF16":
        return {k: torch.from_numpy(np.asarray(v, np.float32).copy()).to(torch.bfloat16).float().numpy()
                for k, v in tensors.items()}
    return tensors


def round_half_away(x):
    """C's round(): halves away from zero (torch.round goes to even)."""
    t = torch.trunc(x)
    return t + torch.where(torch.abs(x - t) >= 0.5, torch.sign(x), torch.zeros_like(x))


def store_as(w, dtype):
    """A float32 matrix [out, in] as weight type dtype stores it, written from the formulas
    (docs/model-description.md, "Weight types"): bf16 torch's round-to-nearest-even cast; int8 each row
    in groups of 32 columns, scale = max|w| / 127 (raised while subnormal and max|w| / scale >= 127.5),
    q = round half away from zero (w / scale), value
    q * scale (scale 0: 0)."""
    w = torch.from_numpy(np.asarray(w, np.float32).copy())
    if dtype == "bf16":
        return w.to(torch.bfloat16).float().numpy()
    assert dtype in ("int8", "int8_channel"), dtype
    rows, cols = w.shape
    n = cols if dtype == "int8_channel" else 32  # compute int8: one group, the whole row (an output channel)
    G = (cols + n - 1) // n
    g = torch.zeros(rows, G * n, dtype=torch.float32)
    g[:, :cols] = w
    g = g.view(rows, G, n)
    amax = g.abs().amax(dim=2, keepdim=True)
    scale = amax / torch.tensor(127.0, dtype=torch.float32)
    while True:  # a subnormal scale: the next floats up until max|w| / scale < 127.5
        low = (amax > 0) & ~(amax / scale < 127.5)
        if not bool(low.any()):
            break
        scale = torch.where(low, torch.nextafter(scale, torch.full_like(scale, float("inf"))), scale)
    q = torch.where(scale > 0, round_half_away(g / torch.where(scale > 0, scale, torch.ones_like(scale))),
                    torch.zeros_like(g))
    assert float(q.abs().max()) <= 127
    return (q * scale).view(rows, G * n)[:, :cols].contiguous().numpy()


def folded(tensors):
    """FOLDS's scales folded into the linears they scale: the weight's rows and its bias times the scale,
    the scale 1 (what a weight type other than f32 stores: docs/model-description.md, `layer_scale`)."""
    out = dict(tensors)
    for k in FOLDS:
        for name, g in tensors.items():
            if name == k["role"] or name.endswith("." + k["role"]):
                at, g = name[:-len(k["role"])], np.asarray(g, np.float32)
                out[at + k["folds_into"]["weight"]] = g[:, None] * tensors[at + k["folds_into"]["weight"]]
                if at + k["folds_into"]["bias"] in tensors:
                    out[at + k["folds_into"]["bias"]] = g * tensors[at + k["folds_into"]["bias"]]
                out[name] = np.ones_like(g)
    return out


def block_matrix(name):
    """A matrix of a block's linear layers (compute int8 quantizes it per output channel, bf16 rounds it)."""
    return re.search(r"(^|\.)layers\.\d+\.", name) is not None


def stored(cfg, tensors, dtype):
    """The tensors a model of weight type dtype computes with: every 2-D tensor but the positional and
    token-type tables is a linear matrix or the token embedding table, and is stored in dtype (the scales
    of FOLDS folded first); with compute = "int8" the blocks' matrices per output channel instead, with
    compute = "bf16" in bfloat16."""
    compute = cfg.get("compute") if cfg.get("compute") in ("int8", "bf16") else None
    if dtype in (None, "f32") and not compute:
        return tensors
    tensors = folded(tensors)
    keep = {cfg.get("pos_embed_weight", "pos_embed.weight"), cfg.get("token_type_embed_weight",
                                                                      "token_type_embed.weight")}

    def one(k, v):
        if np.ndim(v) != 2 or k in keep:
            return v
        if compute and block_matrix(k):
            return store_as(v, "int8_channel" if compute == "int8" else "bf16")
        return v if dtype in (None, "f32") else store_as(v, dtype)
    return {k: one(k, v) for k, v in tensors.items()}


def write_description(cfg, path):
    """cfg -> a description file at path (configs.write_description, by file path)."""
    configs.write_description(cfg, os.path.dirname(path), os.path.basename(path))


def state_dict_numpy(module, prefix=""):
    return {prefix + k: v.detach().cpu().numpy().astype(np.float32) for k, v in module.state_dict().items()}


# ---- the reference model ---------------------------------------------------

def sinusoidal_table(T, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...), float64 -> float32."""
    pos = np.arange(T, dtype=np.float64)[:, None]
    i2 = np.arange(0, d, 2, dtype=np.float64)
    angle = pos / np.power(10000.0, i2 / d)
    pe = np.zeros((T, d), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return torch.from_numpy(pe.astype(np.float32))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x, theta, pairing="rotate_half"):
    """x [B, H, T, d_k]: rotary positions.  rotate_half: GPT-NeoX / HF LLaMA
    (pairs (x[i], x[i + d_k/2])); interleaved: Meta's LLaMA / llama2.c, pairs
    (x[2i], x[2i+1]) as complex numbers times e^(i pos theta^(-2i/d_k))
    (precompute_freqs_cis / apply_rotary_emb)."""
    dk, T = x.shape[-1], x.shape[-2]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dk, 2).float() / dk))
    freqs = torch.outer(torch.arange(T).float(), inv_freq)
    if pairing == "interleaved":
        cis = torch.polar(torch.ones_like(freqs), freqs)  # [T, d_k/2]
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], dk // 2, 2).contiguous())
        return torch.view_as_real(xc * cis).flatten(-2)
    emb = torch.cat([freqs, freqs], dim=-1)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def repeat_kv(x, n_rep):
    """x [B, KV, T, d_k] -> [B, KV * n_rep, T, d_k]: query head h reads K/V head h // n_rep (HF's repeat_kv)."""
    B, KV, T, dk = x.shape
    return x[:, :, None].expand(B, KV, n_rep, T, dk).reshape(B, KV * n_rep, T, dk)


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class RefModel:
    """Every option of a resolved description, on a dict of torch tensors named
    as docs/model-description.md's weight names say.  For training (loss_and_grads), dropout
    takes its keep masks from the caller, named by site as the C runtime names
    them (ff_rt_visit_dropout_sites: "encoder.embed", "decoder.layers.0.self_attn.probs", ...)."""

    def __init__(self, cfg, weights):
        self.c = dict(cfg)
        self.w = {k: torch.as_tensor(v) for k, v in weights.items()}
        c = self.c
        c.setdefault("arch", "encoder")
        c.setdefault("norm", "post")
        c.setdefault("norm_kind", "layernorm")
        c.setdefault("final_norm", False)
        c.setdefault("eps", 1e-5)
        c.setdefault("activation", "relu")
        c.setdefault("bias", True)
        c.setdefault("positional", "none")
        c.setdefault("rope_theta", 10000.0)
        c.setdefault("kv_heads", c["heads"])
        c.setdefault("rope_pairing", "rotate_half")
        c.setdefault("scale_embeddings", True)
        c.setdefault("tie_embeddings", True)
        c.setdefault("max_seq", 512)
        c.setdefault("prefix", "")
        c.setdefault("d_ff", 4 * c["d_model"])
        c.setdefault("head_bias", False)
        c.setdefault("lm_head", True)
        c.setdefault("token_types", 0)
        c.setdefault("embed_norm", False)
        if c["arch"] == "encoder-decoder":
            c.setdefault("encoder_layers", c.get("layers"))
            c.setdefault("decoder_layers", c.get("layers"))
        self.masks, self.p = None, 0.0  # dropout: site name -> keep mask (0/1), and p
        self.compute = c.get("compute", "f32")  # int8, bf16: the blocks' linear layers round their inputs

    def qin(self, x):
        """x's rows as the blocks' linear layers take them: compute bf16, rounded to bfloat16 (nearest even);
        int8 (kernels/int8.c), the scale max|x| / 127, x * (127 / max|x|) rounded to the nearest, ties to
        even, times the scale."""
        if self.compute == "bf16":
            return x.to(torch.bfloat16).float()
        if self.compute != "int8":
            return x
        a = x.abs().amax(dim=-1, keepdim=True)
        big = a >= 1e-30
        inv = torch.where(big, torch.tensor(127.0, dtype=x.dtype) / torch.where(big, a, torch.ones_like(a)),
                          torch.zeros_like(a))
        q = torch.clamp(torch.round(x * inv), -127.0, 127.0)
        return q * torch.where(big, a / torch.tensor(127.0, dtype=x.dtype), torch.zeros_like(a))

    def drop(self, x, site):
        """Inverted dropout with the given mask at a site (the lone stacks named as the C runtime names them:
        the encoder's "encoder.", decoder-only's "decoder.")."""
        if self.masks is None:
            return x
        if not site.startswith(("encoder.", "decoder.")):
            site = ("decoder." if self.c["arch"] == "decoder-only" else "encoder.") + site
        return x * self.masks[site].to(x.dtype) / (1.0 - self.p)

    def W(self, name, outside=False):
        """A tensor of the layer stack (the prefix first), or outside it (named in full)."""
        return self.w.get(name if outside else self.c["prefix"] + name)

    def linear(self, x, name):
        """nn.Linear `name` (its .weight and .bias) of the layer stack, times the scale folded into it, if any
        (FOLDS: LayerScale's gamma scales attention's out_proj and the feed-forward's linear2)."""
        y = F.linear(self.qin(x), self.W(name + ".weight"), self.W(name + ".bias"))
        s = fold_scales(self.w, self.c, self.c["prefix"] + name + ".weight")
        return y if s is None else y * s

    def norm(self, x, name, outside=False):
        if self.c["norm_kind"] == "rmsnorm":
            return rms_norm(x, self.W(name + ".weight", outside), self.c["eps"])
        return F.layer_norm(x, (x.shape[-1],), self.W(name + ".weight", outside), self.W(name + ".bias", outside),
                            self.c["eps"])

    def attention(self, xq, xkv, name, allowed, rope):
        """nn.MultiheadAttention's math: in_proj rows q|k|v (k, v of kv_heads heads);
        allowed [B, Tq, Tk] bool."""
        c, d = self.c, self.c["d_model"]
        H, KV, dk = c["heads"], c["kv_heads"], d // c["heads"]
        kvd = KV * dk
        Win, bin_ = self.W(name + ".in_proj_weight"), self.W(name + ".in_proj_bias")
        xq, xkv = self.qin(xq), self.qin(xkv)
        q = F.linear(xq, Win[:d], None if bin_ is None else bin_[:d])
        k = F.linear(xkv, Win[d:d + kvd], None if bin_ is None else bin_[d:d + kvd])
        v = F.linear(xkv, Win[d + kvd:], None if bin_ is None else bin_[d + kvd:])
        B, Tq, Tk = xq.shape[0], xq.shape[1], xkv.shape[1]
        q = q.view(B, Tq, H, dk).transpose(1, 2)
        k = k.view(B, Tk, KV, dk).transpose(1, 2)
        v = v.view(B, Tk, KV, dk).transpose(1, 2)
        if rope:
            q, k = apply_rope(q, c["rope_theta"], c["rope_pairing"]), apply_rope(k, c["rope_theta"], c["rope_pairing"])
        k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
        scores = q @ k.transpose(-1, -2) / math.sqrt(dk)
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        out = self.drop(torch.softmax(scores, dim=-1), name + ".probs") @ v
        out = out.transpose(1, 2).reshape(B, Tq, d)
        return self.linear(out, name + ".out_proj")

    def ffn(self, x, L):
        h = F.linear(self.qin(x), self.W(L + "linear1.weight"), self.W(L + "linear1.bias"))
        act = self.c["activation"]
        if act == "relu":
            h = F.relu(h)
        elif act == "gelu":
            h = F.gelu(h)
        elif act == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        elif act == "silu":
            h = F.silu(h)
        else:
            f = self.c["d_ff"]
            h = F.silu(h[..., :f]) * h[..., f:]
        h = self.drop(h, L + "ffn.hidden")
        return self.linear(h, L + "linear2")

    def sublayer(self, x, norm_name, f, site):
        if self.c["norm"] == "pre":
            return x + self.drop(f(self.norm(x, norm_name)), site)
        return self.norm(x + self.drop(f(x), site), norm_name)

    def embed(self, ids_or_x, stack=""):
        c = self.c
        if c.get("vocab"):
            x = F.embedding(torch.as_tensor(ids_or_x, dtype=torch.long), self.W(c.get("embed_weight", "embed.weight"), True))
            if c["scale_embeddings"]:
                x = x * math.sqrt(c["d_model"])
        else:
            x = torch.as_tensor(ids_or_x, dtype=torch.float32)
        T = x.shape[1]
        if c["positional"] == "sinusoidal":
            x = x + sinusoidal_table(T, c["d_model"])
        elif c["positional"] == "learned":
            x = x + self.W(c.get("pos_embed_weight", "pos_embed.weight"), True)[:T]
        if c.get("vocab") and c["token_types"]:  # BERT's token_type_ids, all 0
            x = x + self.W(c.get("token_type_embed_weight", "token_type_embed.weight"), True)[0]
        if c["embed_norm"]:  # BERT's embeddings.LayerNorm
            x = self.norm(x, "embed_norm", True)
        return self.drop(x, stack + "embed")

    def stack(self, x, prefix, n, allowed, memory=None, mem_allowed=None):
        rope = self.c["positional"] == "rope"
        for i in range(n):
            L = "%slayers.%d." % (prefix, i)
            x = self.sublayer(x, L + "norm1", lambda h: self.attention(h, h, L + "self_attn", allowed, rope),
                              L + "self_attn.out")
            if memory is not None:
                x = self.sublayer(x, L + "norm2",
                                  lambda h: self.attention(h, memory, L + "multihead_attn", mem_allowed, False),
                                  L + "multihead_attn.out")
            x = self.sublayer(x, L + ("norm3" if memory is not None else "norm2"), lambda h: self.ffn(h, L),
                              L + "ffn.out")
        if self.c["final_norm"]:
            x = self.norm(x, prefix + "norm")
        return x

    def outputs(self, src, lengths, tgt=None):
        """The output tensor (logits or hidden states): src [B, S] ids or [B, S, d]; lengths [B]; tgt for
        encoder-decoder."""
        c = self.c
        x = self.embed(src, "encoder." if c["arch"] == "encoder-decoder" else "")
        B, S = x.shape[0], x.shape[1]
        lengths = torch.as_tensor(lengths, dtype=torch.long)
        key_ok = torch.arange(S)[None, :] < lengths[:, None]  # [B, S]
        if c["arch"] == "encoder":
            h = self.stack(x, "", c["layers"], key_ok[:, None, :].expand(B, S, S))
        elif c["arch"] == "decoder-only":
            causal = torch.tril(torch.ones(S, S, dtype=torch.bool))
            h = self.stack(x, "", c["layers"], key_ok[:, None, :] & causal[None])
        else:
            mem = self.stack(x, "encoder.", c["encoder_layers"], key_ok[:, None, :].expand(B, S, S))
            y = self.embed(tgt, "decoder.")
            T = y.shape[1]
            causal = torch.tril(torch.ones(T, T, dtype=torch.bool))[None].expand(B, T, T)
            h = self.stack(y, "decoder.", c["decoder_layers"], causal, mem, key_ok[:, None, :].expand(B, T, S))
        if c.get("vocab") and c["lm_head"]:
            head = self.W(c.get("embed_weight", "embed.weight"), True) if c["tie_embeddings"] else \
                self.W(c.get("lm_head_weight", "lm_head.weight"), True)
            h = h @ head.T
            if c["head_bias"]:
                h = h + self.W(c.get("lm_head_bias", "lm_head.bias"), True)
        return h

    def forward(self, src, lengths, tgt=None):
        """outputs() as a numpy array, without autograd."""
        with torch.no_grad():
            return self.outputs(src, lengths, tgt).numpy()

    def loss_and_grads(self, src, lengths, labels, tgt=None, ignore_index=-100, label_smoothing=0.0, masks=None,
                       p=0.0, dtype=torch.float64):
        """PyTorch autograd's training step: CrossEntropyLoss(ignore_index, label_smoothing, reduction='sum') of
        the logits against labels, computed in dtype (float64: the reference's own rounding out of the way),
        dropout p with the keep masks given (site name -> 0/1 array).  Returns (loss, name -> gradient)."""
        saved = self.w
        params = {k: v.detach().to(dtype).requires_grad_(True) for k, v in saved.items()}
        self.w, self.masks, self.p = params, None if masks is None else {k: torch.as_tensor(v) for k, v in
                                                                       masks.items()}, p
        try:
            logits = self.outputs(src, lengths, tgt)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                   torch.as_tensor(np.asarray(labels), dtype=torch.long).reshape(-1),
                                   ignore_index=ignore_index, label_smoothing=label_smoothing, reduction="sum")
            loss.backward()
        finally:
            self.w, self.masks, self.p = saved, None, 0.0
        grads = {k: (v.grad if v.grad is not None else torch.zeros_like(v)).numpy() for k, v in params.items()}
        return float(loss), grads


def random_weights(cfg, names_shapes, gen):
    """Torch-random weights for RefModel cases: matrices ~ N(0, 1/fan_in),
    vectors ~ N(0, 0.1), norm weights ~ 1 + N(0, 0.1), the scales of FOLDS ~ 1 + N(0, 0.5)."""
    out = {}
    for name, shape in names_shapes:
        if len(shape) == 2:
            t = torch.randn(*shape, generator=gen) / math.sqrt(shape[1])
            if name.endswith("embed.weight") or name.endswith("lm_head.weight"):
                t = torch.randn(*shape, generator=gen)
        elif "norm" in name.split(".")[-2] and name.endswith("weight"):
            t = 1 + 0.1 * torch.randn(*shape, generator=gen)
        elif any(name.endswith("." + k["role"]) for k in FOLDS):
            t = 1 + 0.5 * torch.randn(*shape, generator=gen)
        else:
            t = 0.1 * torch.randn(*shape, generator=gen)
        out[name] = t.numpy().astype(np.float32)
    return out


def weight_names(cfg):
    """docs/model-description.md's weight names for a config: [(name, shape)]."""
    c = RefModel(cfg, {}).c
    d, p = c["d_model"], c["prefix"]
    qkv = d + 2 * c["kv_heads"] * (d // c["heads"])
    up = 2 * c["d_ff"] if c["activation"] == "swiglu" else c["d_ff"]
    out = []

    def norm(n):
        out.append((p + n + ".weight", (d,)))
        if c["norm_kind"] == "layernorm":
            out.append((p + n + ".bias", (d,)))

    def attn(n):
        out.append((p + n + ".in_proj_weight", (qkv, d)))
        if c["bias"]:
            out.append((p + n + ".in_proj_bias", (qkv,)))
        out.append((p + n + ".out_proj.weight", (d, d)))
        if c["bias"]:
            out.append((p + n + ".out_proj.bias", (d,)))

    def stack(prefix, n, cross):
        for i in range(n):
            L = "%slayers.%d." % (prefix, i)
            attn(L + "self_attn")
            if cross:
                attn(L + "multihead_attn")
            for k in FOLDS:  # vectors [d_model] of the layer (or of its cross-attention)
                if needs_hold(c, k["needs"]) and (cross or k["scope"] == "layer"):
                    out.append((p + L + k["role"], (d,)))
            out.append((p + L + "linear1.weight", (up, d)))
            if c["bias"]:
                out.append((p + L + "linear1.bias", (up,)))
            out.append((p + L + "linear2.weight", (d, c["d_ff"])))
            if c["bias"]:
                out.append((p + L + "linear2.bias", (d,)))
            norm(L + "norm1")
            norm(L + "norm2")
            if cross:
                norm(L + "norm3")
        if c["final_norm"]:
            norm(prefix + "norm")

    if c.get("vocab"):
        out.append((c.get("embed_weight", "embed.weight"), (c["vocab"], d)))
    if c["positional"] == "learned":
        out.append((c.get("pos_embed_weight", "pos_embed.weight"), (c["max_seq"], d)))
    if c.get("vocab") and c["token_types"]:
        out.append((c.get("token_type_embed_weight", "token_type_embed.weight"), (c["token_types"], d)))
    if c["embed_norm"]:
        out.append(("embed_norm.weight", (d,)))
        if c["norm_kind"] == "layernorm":
            out.append(("embed_norm.bias", (d,)))
    if c["arch"] == "encoder-decoder":
        stack("encoder.", c["encoder_layers"], False)
        stack("decoder.", c["decoder_layers"], True)
    else:
        stack("", c["layers"], False)
    if c.get("vocab") and c["lm_head"] and not c["tie_embeddings"]:
        out.append((c.get("lm_head_weight", "lm_head.weight"), (c["vocab"], d)))
    if c.get("vocab") and c["lm_head"] and c["head_bias"]:
        out.append((c.get("lm_head_bias", "lm_head.bias"), (c["vocab"],)))
    return out


def split_projections(tensors, d_model, swiglu):
    """A fused state dict stored as Hugging Face keeps it: each in_proj_weight /
    in_proj_bias as q_proj, k_proj, v_proj (q the first d_model rows, k and v
    halves of the rest) and, for swiglu, each linear1 as gate_proj, up_proj
    (halves) at the layer level."""
    out = {}
    for name, t in tensors.items():
        if ".in_proj_" in name:
            module, kind = name.rsplit(".in_proj_", 1)
            kv = (t.shape[0] - d_model) // 2
            for part, rows in (("q", t[:d_model]), ("k", t[d_model:d_model + kv]), ("v", t[d_model + kv:])):
                out["%s.%s_proj.%s" % (module, part, kind)] = rows
        elif swiglu and ".linear1." in name:
            layer, kind = name.split("linear1.")
            f = t.shape[0] // 2
            out[layer + "gate_proj." + kind], out[layer + "up_proj." + kind] = t[:f], t[f:]
        else:
            out[name] = t
    return out


# ---- helpers of the PyTorch comparisons (torch_parity.py, nan_parity.py) ----

def lengths_mask(lengths, S):
    return torch.arange(S)[None, :] >= torch.as_tensor(lengths)[:, None]  # True = padding


def randomize(module, gen, bias=True):
    """PyTorch initialises norms to 1/0 and attention biases to 0: perturb them
    so the test sees every parameter; zero the projection biases for bias=False."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                is_proj = "norm" not in name
                p.copy_(0.1 * torch.randn(p.shape, generator=gen) if (bias or not is_proj) else torch.zeros(p.shape))


def valid_rows(cfg, lengths, shape):
    B, T = shape[0], shape[1]
    if cfg.get("arch", "encoder") == "encoder-decoder":
        return np.ones((B, T), dtype=bool)
    return np.arange(T)[None, :] < np.asarray(lengths)[:, None]
