#!/usr/bin/python3
"""fixformer_export: PyTorch models -> fixformer (a description + safetensors).

torch and numpy only (Debian's python3-torch 1.13 has no safetensors package).

    import fixformer_export as fx
    fx.save_safetensors(model.state_dict(), "w.safetensors")   # any tensors, F32 by default
    print(fx.describe(model, name="lm", arch="decoder-only"))  # the .lua text
    lua = fx.export(model, "out", "lm", arch="decoder-only")    # out/lm.lua + out/lm.safetensors

describe() reads what the module holds: nn.Transformer, nn.TransformerEncoder,
nn.TransformerDecoder, their layer classes (a lone layer, or an nn.ModuleList
named `layers` with an optional norm `norm` beside it), and a module
wrapping one of them with an nn.Embedding (tokens; a second one whose
attribute name contains "pos" is learned positions) and an nn.Linear output
head (with or without a bias).  Norms are nn.LayerNorm (without weight or
bias: written as ones and zeros), nn.RMSNorm (torch >= 2.4) or this module's
RMSNorm; activations relu, gelu, nn.GELU(approximate="tanh"), nn.SiLU and this
module's swiglu.  What forward() does is not visible to it, so the caller
says it: `arch` ("decoder-only" for a causal stack), `positional`,
`scale_embeddings`, `tie_embeddings` (forward multiplies by the embedding
matrix), `lm_head=False` (forward returns the hidden states), `embed_norm`
and `token_types` (BERT's embeddings: a norm of their sum, a token-type
row 0 added), `max_seq`.
Whatever fixformer cannot compute, and any value outside what its validator
reads (an eps that is inf, NaN or <= 0, ...), is a ValueError naming the
attribute or key; nothing is written then.

Command line: fixformer_export.py --help
"""
import argparse
import importlib.util
import json
import math
import os
import re
import struct
import sys
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["save_safetensors", "tied_aliases", "describe", "describe_config", "export", "ExportError", "RMSNorm",
           "swiglu"]


class ExportError(ValueError):
    """What fixformer cannot express, naming the module attribute."""


# ---- safetensors ---------------------------------------------------------------
# https://huggingface.co/docs/safetensors: u64 LE header length N, N bytes of
# JSON {name: {dtype, shape, data_offsets: [begin, end)}} (offsets into the
# data buffer that follows), optional "__metadata__" {str: str}.

_TORCH_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.float64: "F64",
                 torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                 torch.uint8: "U8", torch.bool: "BOOL"}
_HALF = {"F16": torch.float16, "BF16": torch.bfloat16}
_HEADER_LIMIT = 100 << 20  # the format's own limit, and fixformer's reader's


def _as_tensor(name, value):
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise ExportError("tensor %r: a %s, not a torch.Tensor or numpy array" % (name, type(value).__name__))
    if value.dtype not in _TORCH_DTYPES:
        raise ExportError("tensor %r: dtype %s has no safetensors name here" % (name, value.dtype))
    return value.detach().to("cpu")


def _converted(t, dtype):
    """The tensor as written: floats to F32 (or F16/BF16 when asked; "keep"
    keeps F16 and BF16 as they are), integers and bools unchanged."""
    if not t.is_floating_point():
        return t
    if dtype == "keep":
        return t if t.dtype in (torch.float16, torch.bfloat16) else t.to(torch.float32)
    return t.to(_HALF.get(dtype, torch.float32))


def _raw_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits as int16
        return t.view(torch.int16).numpy().astype("<i2").tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def _write_atomic(path, chunks):
    """chunks -> path through a temporary beside it, renamed at the end: a
    failure leaves nothing half-written and an earlier file untouched."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ExportError("%s: is a directory" % path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def tied_aliases(tensors):
    """{later name: first name} of the tensors that are the same tensor as an
    earlier one in the mapping's order (same storage, offset, shape, strides:
    a tied head after its embedding)."""
    seen, aliases = {}, {}
    for name, t in tensors.items():
        if isinstance(t, torch.Tensor) and t.numel():
            key = (t.device, t.data_ptr(), t.dtype, tuple(t.shape), t.stride())
            if key in seen:
                aliases[name] = seen[key]
            else:
                seen[key] = name
    return aliases


def save_safetensors(tensors, path, dtype="F32", metadata=None, tied="keep"):
    """Write tensors (a state_dict or any {name: tensor or numpy array}) to
    path as safetensors: names sorted, data in that order, the header padded
    with spaces to a multiple of 8 so every tensor starts 8-byte aligned.
    dtype: "F32" (default: every float tensor as float32), "F16", "BF16", or
    "keep" (F16/BF16 tensors as they are, other floats F32). tied: "keep"
    writes every name (a tied tensor once per name); "drop" writes a tensor
    that is the same as an earlier one (tied_aliases) only under the earlier
    name, as fixformer's tie_embeddings wants. Atomic: temporary + rename.
    Returns path."""
    if tied not in ("keep", "drop"):
        raise ExportError("tied: %r is not one of keep, drop" % (tied,))
    if tied == "drop":
        aliases = tied_aliases(tensors)
        tensors = {k: v for k, v in tensors.items() if k not in aliases}
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        if not isinstance(name, str) or not name or name == "__metadata__":
            raise ExportError("tensor name %r: must be a non-empty string other than __metadata__" % (name,))
        t = _converted(_as_tensor(name, tensors[name]), dtype)
        raw = _raw_bytes(t)
        header[name] = {"dtype": _TORCH_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
        pad = -len(raw) % 8  # keeps the next tensor aligned (F16/BF16, odd sizes)
        if pad:
            blobs.append(b"\0" * pad)
            offset += pad
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise ExportError("metadata: keys and values must be strings")
        header = dict([("__metadata__", dict(metadata))] + list(header.items()))
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)
    if len(text) > _HEADER_LIMIT:
        raise ExportError("%s: the header would be %d bytes, over the format's %d" % (path, len(text), _HEADER_LIMIT))
    _write_atomic(path, [struct.pack("<Q", len(text)), text] + blobs)
    return path


# ---- what fixformer computes that torch 1.13 has no module for ------------------

class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight over the last dimension (LLaMA's;
    torch >= 2.4 has nn.RMSNorm, which describe() reads too).  As norm1 /
    norm2 (norm3) of nn.Transformer*Layer and as a stack's final norm, the
    model exports with norm_kind = "rmsnorm"."""

    fixformer_norm = "rmsnorm"  # what describe() recognises

    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.normalized_shape, self.eps = (d_model,), eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def swiglu(x):
    """SwiGLU, the activation of nn.TransformerEncoderLayer(..., dim_feedforward=2 * d_ff,
    activation=swiglu): linear1's 2 d_ff outputs are [gate | up], this gives
    silu(gate) * up, so linear2 takes d_ff (layer.linear2 = nn.Linear(d_ff,
    d_model)).  Exports as activation = "swiglu" (linear1 rows gate | up)."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


swiglu.fixformer_activation = "swiglu"  # what describe() recognises


# ---- reading a module --------------------------------------------------------

def _activation(path, layer):
    a = getattr(layer, "activation", F.relu)
    if a is F.relu or isinstance(a, nn.ReLU):
        return "relu"
    if a is F.gelu:
        return "gelu"
    if getattr(a, "fixformer_activation", None) == "swiglu":
        return "swiglu"
    if a is F.silu or isinstance(a, nn.SiLU):
        return "silu"
    if isinstance(a, nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(getattr(a, "approximate", "none"), None) or \
            _fail(_join(path, "activation"), "GELU(approximate=%r) is not one fixformer has" % a.approximate)
    return _fail(_join(path, "activation"), "%s: fixformer computes relu, gelu (erf), gelu_tanh "
                 "(nn.GELU(approximate='tanh')), silu and swiglu (fixformer_export.swiglu); a custom activation "
                 "cannot be expressed" % getattr(a, "__name__", type(a).__name__))


def _fail(where, what):
    raise ExportError("%s: %s" % (where or "the module", what))


def _attention(path, mha, d):
    if not isinstance(mha, nn.MultiheadAttention):
        _fail(path, "a %s, not nn.MultiheadAttention" % type(mha).__name__)
    if mha.embed_dim != d:
        _fail(path + ".embed_dim", "%d differs from d_model %d" % (mha.embed_dim, d))
    for k in ("kdim", "vdim"):
        if getattr(mha, k) != d:
            _fail(path + "." + k, "%d differs from d_model %d: fixformer's attention takes keys and values "
                  "of width d_model (one fused in_proj_weight)" % (getattr(mha, k), d))
    if mha.bias_k is not None or mha.bias_v is not None:
        _fail(path + ".bias_k", "add_bias_kv=True (a learned extra key and value) cannot be expressed")
    if mha.add_zero_attn:
        _fail(path + ".add_zero_attn", "True (an extra zero key and value) cannot be expressed")
    if (mha.out_proj.bias is not None) != (mha.in_proj_bias is not None):
        _fail(path + ".out_proj.bias", "%s, but in_proj_bias is %s; fixformer's `bias` is one switch for all" % (
            "absent" if mha.out_proj.bias is None else "present", "present" if mha.out_proj.bias is None else "absent"))
    return mha.num_heads, mha.in_proj_bias is not None


def _norm_kind(m):
    """"layernorm" or "rmsnorm" for a norm module fixformer computes, else None."""
    kind = getattr(m, "fixformer_norm", None)
    if kind in ("layernorm", "rmsnorm"):
        return kind
    if isinstance(m, nn.LayerNorm):
        return "layernorm"
    if hasattr(nn, "RMSNorm") and isinstance(m, nn.RMSNorm):  # torch >= 2.4
        return "rmsnorm"
    return None


def _norm(path, ln, d):
    """(norm_kind, eps) of a norm.  A LayerNorm without weight or bias
    (elementwise_affine=False, torch 2's bias=False) is one of weight 1 and
    bias 0: describe_config writes those."""
    kind = _norm_kind(ln)
    if kind is None:
        _fail(path, "a %s, not nn.LayerNorm or an RMSNorm (nn.RMSNorm, fixformer_export.RMSNorm)"
              % type(ln).__name__)
    if tuple(ln.normalized_shape) != (d,):
        _fail(path + ".normalized_shape", "%s, not (d_model,) = (%d,)" % (tuple(ln.normalized_shape), d))
    eps = ln.eps if ln.eps is not None else torch.finfo(torch.float32).eps  # nn.RMSNorm's eps=None
    return kind, float(eps)


def _layer(path, layer, cross):
    """One layer's keys: d_model, heads, d_ff, norm, activation, eps, bias."""
    want = nn.TransformerDecoderLayer if cross else nn.TransformerEncoderLayer
    if type(layer) is not want:  # a subclass may compute something else in forward()
        _fail(path, "a %s: fixformer expresses %s layers here (a custom layer's forward() is not "
              "visible to the exporter)" % (type(layer).__name__, want.__name__))
    d = layer.linear1.in_features
    heads, bias = _attention(_join(path, "self_attn"), layer.self_attn, d)
    if cross:
        h2, b2 = _attention(_join(path, "multihead_attn"), layer.multihead_attn, d)
        if (h2, b2) != (heads, bias):
            _fail(_join(path, "multihead_attn"), "heads/bias differ from self_attn's")
    lin_bias = layer.linear1.bias is not None
    if (layer.linear2.bias is not None) != lin_bias or lin_bias != bias:
        _fail(_join(path, "linear1.bias"), "some projections have biases and others not; fixformer's `bias` is one "
              "switch for all")
    activation = _activation(path, layer)
    up = layer.linear1.out_features
    d_ff = up // 2 if activation == "swiglu" else up  # swiglu: linear1 rows gate | up
    if activation == "swiglu" and up % 2:
        _fail(_join(path, "linear1"), "%d outputs: swiglu takes an even number (gate | up)" % up)
    if layer.linear2.in_features != d_ff or layer.linear2.out_features != d:
        _fail(_join(path, "linear2"), "shape [%d,%d] does not follow linear1 [%d,%d]%s" % (
            layer.linear2.out_features, layer.linear2.in_features, up, d,
            " (swiglu: linear2 takes half of linear1's outputs)" if activation == "swiglu" else ""))
    norms = {_norm(_join(path, n), getattr(layer, n), d) for n in (("norm1", "norm2", "norm3") if cross
                                                                  else ("norm1", "norm2"))}
    if len(norms) != 1:
        _fail(_join(path, "norm1"), "the layer's norms differ (%s); fixformer's are all of one kind and eps"
              % ", ".join("%s eps %g" % k for k in sorted(norms)))
    kind, eps = norms.pop()
    return {"d_model": d, "heads": heads, "d_ff": d_ff, "norm": "pre" if layer.norm_first else "post",
            "norm_kind": kind, "activation": activation, "eps": eps, "bias": bias}


def _stack(path, layers, cross):
    """Layers of one stack -> their common keys and the count."""
    keys = None
    for i, layer in enumerate(layers):
        k = _layer(_join(path, str(i)), layer, cross)
        if keys is None:
            keys = k
        for name, v in k.items():
            if v != keys[name]:
                _fail(_join(path, str(i)), "%s %r differs from layer 0's %r; fixformer's layers are all alike"
                      % (name, v, keys[name]))
    if keys is None:
        _fail(path, "no layers")
    return keys, len(layers)


def _join(prefix, attr):
    return prefix + "." + attr if prefix else attr


def _inside(path, outer):
    """path is the module at outer or one of its descendants ("" is the top)."""
    return outer == "" or path == outer or path.startswith(outer + ".")


def _find_stacks(module):
    """[(kind, path, submodule)] of the layer stacks, outermost only."""
    found, skip = [], []
    for path, m in module.named_modules():
        if any(_inside(path, s) for s in skip):
            continue
        kind = None
        if isinstance(m, nn.Transformer):
            kind = "transformer"
        elif isinstance(m, (nn.TransformerEncoder, nn.TransformerDecoder)):
            kind = "encoder" if isinstance(m, nn.TransformerEncoder) else "decoder"
        elif isinstance(m, nn.ModuleList) and len(m) and all(
                isinstance(x, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)) for x in m):
            kind = "layerlist"
        elif isinstance(m, (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)):
            kind = "layer"
        if kind:
            found.append((kind, path, m))
            skip.append(path)
    return found


def _parent(path):
    return path.rsplit(".", 1)[0] if "." in path else ""


def _leaf(path):
    return path.rsplit(".", 1)[-1]


def _pair_keys(path, enc, dec):
    """nn.Transformer's stacks, or an encoder and decoder side by side."""
    if not isinstance(enc, nn.TransformerEncoder) or not isinstance(dec, nn.TransformerDecoder):
        _fail(_join(path, "encoder"), "a custom encoder or decoder cannot be expressed")
    ek, ne = _stack(_join(path, "encoder.layers"), enc.layers, False)
    dk, nd = _stack(_join(path, "decoder.layers"), dec.layers, True)
    for name, v in dk.items():
        if v != ek[name]:
            _fail(_join(path, "decoder.layers.0"), "%s %r differs from the encoder's %r" % (name, v, ek[name]))
    norms = [(_join(path, s + ".norm"), x.norm) for s, x in (("encoder", enc), ("decoder", dec))]
    if (enc.norm is None) != (dec.norm is None):
        _fail(_join(path, "encoder.norm"), "one stack has a final norm and the other not; fixformer's "
              "final_norm is one switch for both")
    keys = dict(ek, arch="encoder-decoder", encoder_layers=ne, decoder_layers=nd)
    return keys, path, [_join(path, "encoder"), _join(path, "decoder")], norms


def _list_keys(module, path, layers):
    """self.layers = nn.ModuleList([...]) and, beside it, an optional self.norm."""
    if _leaf(path) != "layers":
        _fail(path, "a list of layers must be an attribute named `layers` (fixformer's names are "
              "PREFIX.layers.{i}.*)")
    keys, n = _stack(path, layers, False)
    keys["layers"] = n
    prefix = _parent(path)
    owner = module.get_submodule(prefix) if prefix else module
    norm = getattr(owner, "norm", None)
    norm = norm if isinstance(norm, nn.Module) else None
    paths = [path] + ([_join(prefix, "norm")] if norm is not None else [])
    return keys, prefix, paths, [(_join(prefix, "norm"), norm)]


def _stack_keys(module):
    """The architecture keys of the layer stack(s), the prefix of their
    names (None: a lone layer, written as layers.0.*) and their module paths."""
    stacks = _find_stacks(module)
    if not stacks:
        _fail(type(module).__name__, "holds no nn.Transformer, nn.TransformerEncoder/Decoder or their layers")
    if sorted(k for k, _, _ in stacks) == ["decoder", "encoder"]:
        (_, pd, dec), (_, pe, enc) = sorted(stacks, key=lambda s: s[0])
        if _parent(pe) != _parent(pd) or _leaf(pe) != "encoder" or _leaf(pd) != "decoder":
            _fail(pe or "encoder", "fixformer names an encoder-decoder's stacks PREFIX.encoder and "
                  "PREFIX.decoder; this module has them at %r and %r (rename the attributes or use "
                  "nn.Transformer)" % (pe, pd))
        stacks = [("pair", _parent(pe), (enc, dec))]
    if len(stacks) != 1:
        _fail(stacks[1][1] or type(module).__name__, "a second layer stack (%s); fixformer computes one "
              "model: %s" % (stacks[1][0], ", ".join(p or "(top)" for _, p, _ in stacks)))
    kind, path, m = stacks[0]
    first = m[0] if kind == "layerlist" else m
    if kind == "decoder" or isinstance(first, nn.TransformerDecoderLayer):
        _fail(path or type(m).__name__, "a %s without an encoder: its layers attend to an encoder's "
              "memory (multihead_attn). fixformer's decoder-only models are nn.TransformerEncoder layers "
              "with a causal mask; a decoder needs its encoder (nn.Transformer)" % type(m).__name__)
    if kind in ("transformer", "pair"):
        keys, prefix, paths, norms = _pair_keys(path, *((m.encoder, m.decoder) if kind == "transformer" else m))
    elif kind == "encoder":
        keys, n = _stack(_join(path, "layers"), m.layers, False)
        keys["layers"], prefix, paths, norms = n, path, [path], [(_join(path, "norm"), m.norm)]
    elif kind == "layerlist":
        keys, prefix, paths, norms = _list_keys(module, path, m)
    else:  # one lone layer: written as layers.0.* by export()
        keys = _layer(path, m, False)
        keys["layers"], prefix, paths, norms = 1, None, [path], []
    norms = [(p, n) for p, n in norms if n is not None]
    keys["final_norm"] = bool(norms)
    for p, n in norms:
        kind, eps = _norm(p, n, keys["d_model"])
        if kind != keys["norm_kind"]:
            _fail(p, "%s, but the layers' norms are %s; fixformer's norms are all of one kind"
                  % (kind, keys["norm_kind"]))
        if eps != keys["eps"]:
            _fail(p + ".eps", "%g differs from the layers' eps %g" % (eps, keys["eps"]))
    return keys, prefix, paths


def _params_outside(module, stack_paths):
    """(attribute path, module) of the modules holding parameters outside the stacks."""
    out = []
    for path, m in module.named_modules():
        if any(_inside(path, s) for s in stack_paths):
            continue
        if any(True for _ in m.parameters(recurse=False)):
            out.append((path, m))
    return out


def describe_config(module, name="model", arch=None, vocab=None, positional="none", scale_embeddings=True,
                    tie_embeddings=None, max_seq=None, weights=None, vocabulary=None, lm_head=None,
                    embed_norm=None, token_types=None):
    """The description as a dict (keys in fixformer's order) and the
    tensors it names: (config, {fixformer tensor name: tensor}).
    See describe() for the arguments."""
    if not isinstance(module, nn.Module):
        raise ExportError("expected an nn.Module, got %s" % type(module).__name__)
    keys, prefix, stack_paths = _stack_keys(module)
    if arch is not None:
        pair = keys.get("arch") == "encoder-decoder"
        if pair and arch != "encoder-decoder":
            _fail("arch", "%r, but the module is an encoder-decoder" % (arch,))
        if not pair and arch not in ("encoder", "decoder-only"):
            _fail("arch", "%r: an encoder stack runs as \"encoder\" or, causally masked, \"decoder-only\""
                  % (arch,))
        keys["arch"] = arch
    keys.setdefault("arch", "encoder")
    if positional not in ("none", "sinusoidal", "learned"):
        _fail("positional", "%r: nn.MultiheadAttention has no rotary embedding; one of none, sinusoidal, "
              "learned" % (positional,))
    tensors = _stack_tensors(module, keys, prefix, stack_paths)
    outside = _params_outside(module, stack_paths)
    _embed_norm(module, keys, stack_paths, embed_norm, tensors, outside)
    cfg = _outer(module, keys, outside, tensors, vocab, positional, tie_embeddings, max_seq, lm_head, token_types)
    if cfg["norm_kind"] == "layernorm":
        del cfg["norm_kind"]  # the default: descriptions say it only otherwise
    cfg = dict([("name", name)] + list(cfg.items()))
    if cfg.get("vocab"):
        cfg["scale_embeddings"] = bool(scale_embeddings)
    if prefix:
        cfg["prefix"] = prefix + "."
    if weights:
        cfg["weights"] = weights
    if vocabulary:
        cfg["vocabulary"] = vocabulary
    return cfg, tensors


def _stack_tensors(module, keys, prefix, stack_paths):
    """{fixformer name: tensor} of the stacks: the module's own names, which
    fixformer uses under `prefix`; a lone layer's get layers.0. before them.
    A norm without weight (or a LayerNorm without bias) gets ones (zeros):
    what it computes."""
    if prefix is None:  # a lone layer
        base = stack_paths[0]
        sub = module.get_submodule(base) if base else module
        tensors = {"layers.0." + k: v for k, v in sub.state_dict().items()}
        named = [("layers.0." + p, m) for p, m in sub.named_modules() if p]
    else:
        sd = module.state_dict()
        tensors = {k: v for k, v in sd.items() if "" in stack_paths or any(k.startswith(s + ".") for s in stack_paths)}
        named = [(p, m) for p, m in module.named_modules() if any(_inside(p, s) for s in stack_paths)]
    d = keys["d_model"]
    for p, m in named:
        kind = _norm_kind(m)
        if kind and getattr(m, "weight", None) is None:
            tensors[p + ".weight"] = torch.ones(d)
        if kind == "layernorm" and getattr(m, "bias", None) is None:
            tensors[p + ".bias"] = torch.zeros(d)
    return tensors


def _embed_norm(module, keys, stack_paths, embed_norm, tensors, outside):
    """embed_norm=True: the one norm outside the stacks is applied to the
    summed embeddings (BERT's embeddings.LayerNorm) -> keys["embed_norm"],
    its tensors under fixformer's names (ones and zeros where it has none);
    taken out of outside.  Without it a norm there is refused, one without
    parameters too (forward() would apply what the description leaves out)."""
    if embed_norm not in (None, False, True):
        _fail("embed_norm", "%r: True (forward() norms the summed embeddings) or None" % (embed_norm,))
    norms = [(p, m) for p, m in module.named_modules()
             if _norm_kind(m) and not any(_inside(p, s) for s in stack_paths)]
    if not embed_norm:
        if norms:
            _fail(norms[0][0], "a %s outside the layer stack: not part of what fixformer computes (embed_norm=True "
                  "if forward() norms the summed embeddings with it)" % type(norms[0][1]).__name__)
        return
    if len(norms) != 1:
        _fail("embed_norm", "True, but the module has %s outside the layer stack%s" % (
            "no norm" if not norms else "%d norms" % len(norms), "" if not norms else
            " (%s); fixformer has one embedding norm" % ", ".join(p for p, _ in norms)))
    p, m = norms[0]
    kind, eps = _norm(p, m, keys["d_model"])
    if kind != keys["norm_kind"]:
        _fail(p, "%s, but the layers' norms are %s; fixformer's norms are all of one kind" % (kind, keys["norm_kind"]))
    if eps != keys["eps"]:
        _fail(p + ".eps", "%g differs from the layers' eps %g" % (eps, keys["eps"]))
    weight, bias = getattr(m, "weight", None), getattr(m, "bias", None)
    tensors["embed_norm.weight"] = weight if weight is not None else torch.ones(keys["d_model"])
    if kind == "layernorm":
        tensors["embed_norm.bias"] = bias if bias is not None else torch.zeros(keys["d_model"])
    keys["embed_norm"] = True
    outside[:] = [(q, o) for q, o in outside if o is not m]


def _renormed(path, e, tied):
    """e's table as its lookups leave it: a row longer than max_norm (in
    norm_type) is scaled to max_norm, as forward() does to each row it looks
    up (torch.embedding_renorm_), which a row already scaled passes
    unchanged.  Refused for a table the tied head also reads: its rows then
    depend on which tokens were looked up before."""
    if e.max_norm is None:
        return e.weight
    if tied:
        _fail(path + ".max_norm", "%g on the embedding a tied head multiplies by: forward() renormalises the rows "
              "it looks up, so the head's matrix depends on the tokens seen before" % e.max_norm)
    with torch.no_grad():
        w = e.weight.detach().clone()
        torch.embedding_renorm_(w, torch.arange(w.shape[0]), e.max_norm, e.norm_type)
    return w


def _outer(module, keys, outside, tensors, vocab, positional, tie_embeddings, max_seq, lm_head, token_types):
    """Embeddings and head around the stack -> the remaining keys."""
    d = keys["d_model"]
    embeds = [(p, m) for p, m in outside if isinstance(m, nn.Embedding)]
    heads = [(p, m) for p, m in outside if isinstance(m, nn.Linear)]
    for p, m in outside:
        if not isinstance(m, (nn.Embedding, nn.Linear)):
            _fail(p or type(m).__name__, "a %s outside the layer stack: not part of what fixformer computes "
                  "(token embedding, learned positions, output head%s)" % (type(m).__name__, "; embed_norm=True "
                  "if forward() norms the summed embeddings with it" if _norm_kind(m) else ""))
    pos = [(p, m) for p, m in embeds if "pos" in _leaf(p).lower()]
    tok = [(p, m) for p, m in embeds if (p, m) not in pos]
    types = [(p, m) for p, m in tok if "type" in _leaf(p).lower()]
    if token_types not in (None, False, True):
        _fail("token_types", "%r: True (forward() adds row 0 of an nn.Embedding named *type*) or None"
              % (token_types,))
    if token_types:
        if len(types) != 1 or len(tok) < 2:
            _fail("token_types", "True, but the module has %d nn.Embedding named *type* beside a token embedding "
                  "(%s)" % (len(types), ", ".join(p for p, _ in tok) or "none"))
        tok = [(p, m) for p, m in tok if m is not types[0][1]]
    if len(tok) > 1:
        _fail(tok[1][0], "a second token embedding (%s); fixformer has one, shared by source and target%s"
              % (", ".join(p for p, _ in tok), "; token_types=True if forward() adds its row 0 (BERT's "
                                                "token_type_ids all 0)" if types else ""))
    if len(pos) > 1:
        _fail(pos[1][0], "a second position embedding")
    if len(heads) > 1:
        _fail(heads[1][0], "a second nn.Linear outside the stack (%s); fixformer has one output head"
              % ", ".join(p for p, _ in heads))
    cfg = dict(keys)
    for p, m in embeds:
        if m.embedding_dim != d:
            _fail(p + ".embedding_dim", "%d differs from d_model %d" % (m.embedding_dim, d))
    if pos:
        if positional not in ("none", "learned"):
            _fail(pos[0][0], "a position embedding, but positional = %r" % positional)
        positional = "learned"
        p, m = pos[0]
        if max_seq is not None and max_seq != m.num_embeddings:
            _fail(p + ".num_embeddings", "%d rows, but max_seq = %d" % (m.num_embeddings, max_seq))
        max_seq = m.num_embeddings
        cfg_pos = p + ".weight"
        tensors[cfg_pos] = _renormed(p, m, False)
    elif positional == "learned":
        _fail("positional", "\"learned\", but the module has no nn.Embedding named *pos*")
    if not tok:
        if heads:
            _fail(heads[0][0], "an output head without a token embedding; fixformer's models without vocab "
                  "take and give d_model-wide vectors")
        if vocab is not None:
            _fail("vocab", "given, but the module has no nn.Embedding")
        if positional == "learned":
            _fail(pos[0][0], "learned positions need a token embedding (vocab)")
        if lm_head is not None:
            _fail("lm_head", "given, but the module has no nn.Embedding (no tokens, no head)")
    else:
        p, e = tok[0]
        if vocab is not None and vocab != e.num_embeddings:
            _fail(p + ".num_embeddings", "%d, but vocab = %d" % (e.num_embeddings, vocab))
        vocab = e.num_embeddings
        cfg["vocab"] = vocab
        cfg["embed_weight"] = p + ".weight"
        tied = _head(heads, e, p, vocab, d, tie_embeddings, lm_head, cfg, tensors)
        tensors[p + ".weight"] = _renormed(p, e, tied)
        if tied is not None:
            cfg["tie_embeddings"] = tied
        if token_types:
            q, t = types[0]
            cfg["token_types"] = t.num_embeddings
            cfg["token_type_embed_weight"] = q + ".weight"
            tensors[q + ".weight"] = _renormed(q, t, False)
    cfg["positional"] = positional
    if positional == "learned":
        cfg["pos_embed_weight"] = cfg_pos
    if max_seq is not None:
        cfg["max_seq"] = int(max_seq)
    return cfg


def _head(heads, embed, embed_path, vocab, d, tie_embeddings, lm_head, cfg, tensors):
    """The output head: tied to the embedding (same storage, or the caller
    says forward() multiplies by it) or its own nn.Linear, either with its
    bias or without; or none (lm_head=False: forward returns the hidden
    states).  Returns whether it is tied (None: no head)."""
    if lm_head is False:
        if heads:
            _fail(heads[0][0], "an output head (nn.Linear), but lm_head=False")
        if tie_embeddings:
            _fail("tie_embeddings", "True, but lm_head=False: there is no head to tie")
        cfg["lm_head"] = False
        return None
    if not heads:
        if not tie_embeddings:
            _fail(embed_path, "a token embedding and no output head (nn.Linear): pass tie_embeddings=True if "
                  "forward() multiplies by the embedding matrix, lm_head=False if it returns the hidden states")
        return True
    p, h = heads[0]
    if (h.out_features, h.in_features) != (vocab, d):
        _fail(p, "an output head [%d,%d], not [vocab, d_model] = [%d,%d]" % (h.out_features, h.in_features, vocab, d))
    if h.bias is not None:  # logits = h W^T + b, tied or not
        cfg["head_bias"] = True
        cfg["lm_head_bias"] = p + ".bias"
        tensors[p + ".bias"] = h.bias
    tied = h.weight is embed.weight or (h.weight.data_ptr() == embed.weight.data_ptr()
                                        and h.weight.shape == embed.weight.shape
                                        and h.weight.stride() == embed.weight.stride())
    if tie_embeddings is not None and bool(tie_embeddings) != tied:
        _fail(p + ".weight", "tie_embeddings = %s, but the head %s the embedding's storage"
              % (tie_embeddings, "shares" if tied else "does not share"))
    if not tied:
        cfg["lm_head_weight"] = p + ".weight"
        tensors[p + ".weight"] = h.weight
    return tied


# ---- the description -----------------------------------------------------------

def _load_schema():
    """fixformer's keys, from fixformer_schema.json beside this file (written by
    scripts/gen_schema.py from `fixformer info --schema`, include/ff_schema.h's
    table; tests/schema.py holds it current): {key: (kind, bounds...)} in the
    tuples _check_value reads (int and number: min, max; identifier, string and
    path: the longest; enum: the values), and the keys in the table's order."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixformer_schema.json")
    try:
        with open(path, encoding="utf-8") as f:
            keys = json.load(f)["keys"]
    except (OSError, ValueError, KeyError) as e:
        raise ImportError("%s: fixformer's schema, which goes beside fixformer_export.py: %s" % (path, e))
    schema = {}
    for k in keys:
        kind = k["kind"]
        if kind in ("int", "number"):
            schema[k["key"]] = (kind, k["min"], k["max"])
        elif kind == "enum":
            schema[k["key"]] = (kind, tuple(k["values"]))
        elif kind == "boolean":
            schema[k["key"]] = (kind,)
        else:
            schema[k["key"]] = (kind, k["maxlen"])
    return schema, [k["key"] for k in keys]


# What fixformer reads: int (min, max), number (exclusive min, max; not 0 as a
# float32), identifier, string, path (max length; a path not empty), enum.  A
# value outside is an ExportError, never written.  The description lists its
# keys in the schema's order.
_SCHEMA, _ORDER = _load_schema()


_C_KEYWORDS = set("""auto break case char const continue default do double else enum extern float for goto if inline
    int long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile
    while _Bool _Complex _Imaginary""".split())


def _check_value(key, v):
    """v against the schema of key: ExportError naming the key (as fixformer's validator would)."""
    spec = _SCHEMA.get(key)
    if spec is None:
        _fail(key, "not a key fixformer reads")
    kind = spec[0]
    if kind == "boolean":
        ok = isinstance(v, bool)
    elif kind == "int":
        ok = isinstance(v, int) and not isinstance(v, bool) and spec[1] <= v <= spec[2]
    elif kind == "number":
        ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
              and spec[1] < v <= spec[2] and struct.unpack("<f", struct.pack("<f", v))[0] != 0)
    elif kind == "enum":
        ok = v in spec[1]
    elif kind == "identifier":
        ok = isinstance(v, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v) is not None and len(v) <= spec[1] \
            and v not in _C_KEYWORDS
    else:  # printable, no quotes or backslashes (C strings), no /* or */ (C comments); a file named
        ok = isinstance(v, str) and len(v) <= spec[1] and not re.search(r'[\x00-\x1f\x7f"\\]', v) \
            and "/*" not in v and "*/" not in v and (kind != "path" or v != "")
    if not ok:
        bounds = {"int": "an integer in %s..%s", "number": "a number > %s and <= %s (finite, not 0 as a float32)",
                  "string": "at most %s printable characters, no quotes, backslashes, /* or */",
                  "path": "a file name of 1 to %s printable characters, no quotes, backslashes, /* or */",
                  "identifier": "a C identifier of at most %s characters, not a C keyword", "boolean": "true or false"}
        want = "one of " + ", ".join(spec[1]) if kind == "enum" else bounds[kind] % spec[1:]
        _fail(key, "%r: fixformer reads %s" % (v, want))
    return v


def _lua_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):  # Lua would read `inf`/`nan` as an undefined name
            raise ExportError("%r: not a finite number" % v)
        return repr(v)  # shortest round trip; Lua reads 1e-05 the same
    s = str(v)
    if any(c in s for c in '"\\') or any(ord(c) < 32 for c in s):
        raise ExportError("%r: fixformer's strings hold no quotes, backslashes or control characters" % s)
    return '"%s"' % s


def _lua_text(cfg, source):
    width = max(len(k) for k in cfg)
    lines = ["-- %s: written by python/fixformer_export.py from %s." % (cfg["name"], source),
             "-- Read from the module: shapes, norms, activation, eps, bias, names, tying.",
             "-- Stated by the caller (forward() is not visible): arch, positional, scale_embeddings.",
             "return {"]
    for k in sorted(cfg, key=_ORDER.index):
        lines.append("  %-*s = %s," % (width, k, _lua_value(_check_value(k, cfg[k]))))
    lines.append("}")
    return "\n".join(lines) + "\n"


def describe(module, name="model", arch=None, vocab=None, positional="none", scale_embeddings=True,
             tie_embeddings=None, max_seq=None, weights=None, vocabulary=None, lm_head=None, embed_norm=None,
             token_types=None):
    """The fixformer description (.lua text) of module.

    name: the model's C identifier.  arch: None (from the module: an
    encoder stack is "encoder", nn.Transformer "encoder-decoder") or
    "decoder-only" for an encoder stack run causally.  vocab: checked
    against the token embedding.  positional: "none", "sinusoidal" (added in
    forward()) or "learned" (implied by an nn.Embedding named *pos*).
    scale_embeddings: forward() multiplies token embeddings by sqrt(d_model)
    (fixformer's default).  tie_embeddings: None reads it from the module
    (head and embedding share storage); True when there is no head module and
    forward() multiplies by the embedding matrix.  lm_head: None (from the
    module) or False: no head module, forward() returns the last hidden
    states.  embed_norm: True when forward() applies the one norm outside the
    stack to the summed embeddings before the first layer (BERT's
    embeddings.LayerNorm).  token_types: True when forward() adds row 0 of
    an nn.Embedding named *type* (BERT's token_type_embeddings with every
    token_type_id 0).  max_seq: longest sequence.  weights, vocabulary: file
    names the description carries.  An nn.Embedding with max_norm is written
    renormalised, as its lookups leave it."""
    if not isinstance(name, str) or not name.isidentifier() or not name.isascii() or len(name) > 48:
        _fail("name", "%r is not a C identifier of at most 48 characters" % (name,))
    cfg, _ = describe_config(module, name, arch, vocab, positional, scale_embeddings, tie_embeddings, max_seq,
                             weights, vocabulary, lm_head, embed_norm, token_types)
    return _lua_text(cfg, type(module).__name__)


def export(module, directory, name, dtype="F32", **options):
    """Write DIRECTORY/NAME.lua and DIRECTORY/NAME.safetensors (the tensors
    the description names, and only those: a tied head once) for module;
    the .lua's `weights` names the file. options: as describe(). Returns the
    path of the .lua."""
    describe(module, name=name, **options)  # checks the name and everything else before writing
    cfg, tensors = describe_config(module, name, weights=name + ".safetensors", **options)
    os.makedirs(directory, exist_ok=True)
    wpath = os.path.join(directory, name + ".safetensors")
    lpath = os.path.join(directory, name + ".lua")
    text = _lua_text(cfg, type(module).__name__).encode()
    save_safetensors(tensors, wpath, dtype=dtype)
    try:
        _write_atomic(lpath, [text])
    except BaseException:  # both files or neither
        os.unlink(wpath)
        raise
    return lpath


# ---- command line --------------------------------------------------------------

def _load_object(spec):
    """FILE.py:NAME -> the module NAME in FILE.py (called when it is a
    function or class)."""
    file, _, attr = spec.rpartition(":")
    if not file or not attr:
        raise ExportError("%s: expected FILE.py:NAME" % spec)
    if not os.path.isfile(file):
        raise ExportError("%s: no such file" % file)
    s = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(file))[0], file)
    mod = importlib.util.module_from_spec(s)
    sys.path.insert(0, os.path.dirname(os.path.abspath(file)))
    s.loader.exec_module(mod)
    if not hasattr(mod, attr):
        raise ExportError("%s: has no %r" % (file, attr))
    obj = getattr(mod, attr)
    if not isinstance(obj, nn.Module) and callable(obj):
        obj = obj()
    if not isinstance(obj, nn.Module):
        raise ExportError("%s: %s is a %s, not an nn.Module" % (file, attr, type(obj).__name__))
    return obj


def _load_state_dict(path):
    """A torch.save file of tensors, read without running its pickle's code."""
    try:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ExportError("%s: no such file" % path)
    except Exception:  # weights_only refuses pickled classes
        raise ExportError("%s: not a state_dict of tensors (it pickles other objects, an nn.Module?); a saved "
                          "module needs its code: load it in Python and call fixformer_export.export()" % path)
    if isinstance(sd, dict) and "state_dict" in sd and isinstance(sd["state_dict"], dict):
        sd = sd["state_dict"]  # a training checkpoint's usual layout
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise ExportError("%s: not a dict of tensors (a state_dict)" % path)
    return sd


def _arguments(argv):
    p = argparse.ArgumentParser(
        prog="fixformer_export.py",
        description="PyTorch -> fixformer: a torch.save'd state_dict to safetensors, or an nn.Module to a "
                    "description + weights.",
        epilog="examples:\n"
               "  fixformer_export.py weights model.pt -o model.safetensors\n"
               "  fixformer_export.py module mymodel.py:build -o out --name lm --arch decoder-only\n"
               "  fixformer_export.py describe mymodel.py:build --name lm\n"
               "A torch.save'd state_dict is read with weights_only=True (no pickled code runs).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    w = sub.add_parser("weights", help="torch.save'd state_dict -> safetensors (names as they are)")
    w.add_argument("source", metavar="IN.pt")
    w.add_argument("-o", "--output", required=True, metavar="OUT.safetensors")
    w.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16", "keep"],
                   help="float tensors as (default F32; keep: F16/BF16 stay)")
    w.add_argument("--keep-tied", action="store_true",
                   help="write a tied tensor under each of its names (default: once, under its first name, "
                        "as fixformer's tie_embeddings wants)")
    for cmd, helptext in (("module", "nn.Module -> DIR/NAME.lua + DIR/NAME.safetensors"),
                          ("describe", "nn.Module -> its description on stdout")):
        m = sub.add_parser(cmd, help=helptext)
        m.add_argument("source", metavar="FILE.py:NAME", help="a module, or a function returning one, in FILE.py")
        if cmd == "module":
            m.add_argument("-o", "--output", required=True, metavar="DIR")
            m.add_argument("--dtype", default="F32", choices=["F32", "F16", "BF16", "keep"])
        m.add_argument("--name", default="model", help="the model's C identifier (default model)")
        m.add_argument("--state-dict", metavar="W.pt", help="load these weights into the module first")
        m.add_argument("--arch", choices=["encoder", "decoder-only", "encoder-decoder"])
        m.add_argument("--positional", default="none", choices=["none", "sinusoidal", "learned"])
        m.add_argument("--no-scale-embeddings", action="store_true",
                       help="forward() does not multiply token embeddings by sqrt(d_model)")
        m.add_argument("--tie-embeddings", action="store_true",
                       help="no head module: forward() multiplies by the embedding matrix")
        m.add_argument("--no-lm-head", action="store_true",
                       help="no head module: forward() returns the last hidden states")
        m.add_argument("--embed-norm", action="store_true",
                       help="forward() norms the summed embeddings with the one norm outside the stack")
        m.add_argument("--token-types", action="store_true",
                       help="forward() adds row 0 of the nn.Embedding named *type* (token_type_ids all 0)")
        m.add_argument("--max-seq", type=int)
        m.add_argument("--vocabulary", metavar="FILE", help="the vocabulary file the description names")
    return p.parse_args(argv)


def main(argv=None):
    a = _arguments(argv)
    try:
        if a.command == "weights":
            sd = _load_state_dict(a.source)
            if not a.keep_tied:
                for alias, first in tied_aliases(sd).items():
                    sys.stderr.write("fixformer_export: %s is %s (tied): written once, as %s\n"
                                     % (alias, first, first))
            save_safetensors(sd, a.output, dtype=a.dtype, tied="keep" if a.keep_tied else "drop")
            print(a.output)
            return 0
        module = _load_object(a.source)
        if a.state_dict:
            module.load_state_dict(_load_state_dict(a.state_dict))
        opts = dict(arch=a.arch, positional=a.positional, scale_embeddings=not a.no_scale_embeddings,
                    tie_embeddings=True if a.tie_embeddings else None, max_seq=a.max_seq,
                    vocabulary=a.vocabulary, lm_head=False if a.no_lm_head else None,
                    embed_norm=True if a.embed_norm else None, token_types=True if a.token_types else None)
        if a.command == "describe":
            sys.stdout.write(describe(module, name=a.name, **opts))
        else:
            print(export(module, a.output, a.name, dtype=a.dtype, **opts))
        return 0
    except (ExportError, OSError) as e:
        sys.stderr.write("fixformer_export: %s\n" % str(e).replace("\n", " "))
        return 1


if __name__ == "__main__":
    sys.exit(main())
