"""Seeded random model descriptions for the differential and cross tests.

random_config(rng, name, force=i) draws every description key (the weight
type `dtype` with dtype=True); `force`
cycles the architecture, norm placement and kind, activation and positions:
16 consecutive configs cover all of them (12 miss swiglu; tests/emitted.py's
FORCES is six that do)."""

import os
import random

import numpy as np

ARCHS = ["encoder", "decoder-only", "encoder-decoder"]
ACTS = ["relu", "gelu", "gelu_tanh", "swiglu"]
POS = ["none", "sinusoidal", "learned", "rope"]


def random_config(rng, name, force=None, dtype=False):
    heads = rng.choice([1, 2, 3, 4, 5])
    pos = POS[force % 4] if force is not None else rng.choice(POS)
    d_k = rng.choice([2, 4, 6, 8] if pos == "rope" else [1, 2, 3, 5, 6, 8])
    arch = ARCHS[force % 3] if force is not None else rng.choice(ARCHS)
    cfg = {
        "name": name,
        "arch": arch,
        "d_model": heads * d_k,
        "heads": heads,
        "d_ff": rng.choice([3, 7, 13, 24, 37]),
        "norm": rng.choice(["post", "pre"]) if force is None else ["post", "pre"][(force // 3) % 2],
        "norm_kind": rng.choice(["layernorm", "rmsnorm"]) if force is None else ["layernorm", "rmsnorm"][(force // 2) % 2],
        "final_norm": rng.random() < 0.5,
        "eps": rng.choice([1e-5, 1e-6, 1e-3]),
        "activation": ACTS[(force // 4) % 4] if force is not None else rng.choice(ACTS),
        "bias": rng.random() < 0.7,
        "positional": pos,
        "max_seq": rng.choice([9, 16, 32]),
    }
    if arch == "encoder-decoder":
        cfg["encoder_layers"] = rng.randint(1, 3)
        cfg["decoder_layers"] = rng.randint(1, 3)
    else:
        cfg["layers"] = rng.randint(1, 3)
    if rng.random() < 0.6:
        cfg["vocab"] = rng.choice([5, 17, 40])
        cfg["scale_embeddings"] = rng.random() < 0.7
        cfg["tie_embeddings"] = rng.random() < 0.6
    if pos == "rope" and rng.random() < 0.3:
        cfg["rope_theta"] = 500.0
    # drawn last, so that the keys above are drawn as before
    divisors = [k for k in range(1, heads) if heads % k == 0]
    if divisors and rng.random() < 0.5:  # grouped-query (kv_heads 1: multi-query)
        cfg["kv_heads"] = rng.choice(divisors)
    if pos == "rope" and rng.random() < 0.5:
        cfg["rope_pairing"] = "interleaved"
    embed_head_keys(cfg)
    if dtype:
        weight_type_key(cfg)
    layer_scale_key(cfg)
    return cfg


def weight_type_key(cfg):
    """The weight type (issue 13), drawn like embed_head_keys from a generator of its own: f32, bf16, int8."""
    cfg["dtype"] = random.Random("dtype %r" % sorted(cfg.items())).choice(["f32", "bf16", "int8"])


def layer_scale_key(cfg):
    """LayerScale (issue 24's weight kind), drawn like embed_head_keys from a generator of its own."""
    if random.Random("layer_scale %r" % sorted(cfg.items())).random() < 0.5:
        cfg["layer_scale"] = True


def embed_head_keys(cfg):
    """The embedding and output-head keys (issue 12), drawn from a generator of
    their own seeded by the config drawn so far, which therefore stays as it was."""
    r = random.Random("embed/head %r" % sorted(cfg.items()))
    if cfg.get("vocab"):
        if r.random() < 0.2:
            cfg["lm_head"] = False
        elif r.random() < 0.4:
            cfg["head_bias"] = True
        if r.random() < 0.3:
            cfg["token_types"] = r.choice([1, 2, 3])
    if r.random() < 0.3:
        cfg["embed_norm"] = True


def coverage(cfg):
    """The words a config covers, for the tests' coverage checks."""
    out = {cfg["arch"], cfg["norm"], cfg["norm_kind"], cfg["activation"], cfg["positional"]}
    if cfg.get("kv_heads", cfg["heads"]) < cfg["heads"]:
        out.add("grouped-query")
    if cfg.get("rope_pairing") == "interleaved":
        out.add("interleaved")
    out.update(k for k in ("head_bias", "token_types", "embed_norm") if cfg.get(k))
    if cfg.get("lm_head") is False:
        out.add("no lm_head")
    if cfg.get("dtype", "f32") != "f32":
        out.add(cfg["dtype"])
    return out


def lua_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"%s"' % v
    if isinstance(v, (list, tuple)):
        return "{ %s }" % ", ".join(lua_value(x) for x in v)
    if isinstance(v, dict):  # a nested table, e.g. the train block
        return "{ %s }" % ", ".join("%s = %s" % (k, lua_value(x)) for k, x in v.items())
    return repr(v)


def write_description(cfg, directory, filename="model.lua"):
    path = os.path.join(directory, filename)
    with open(path, "w") as f:
        f.write("return {\n")
        for k, v in cfg.items():
            f.write("  %s = %s,\n" % (k, lua_value(v)))
        f.write("}\n")
    return path


def inputs(cfg, rng, d):
    """Random inputs: (files for run, B, T) with padded lengths."""
    B = rng.randint(1, 3)
    S = rng.choice([1, rng.randint(2, 9)])
    T = rng.choice([1, rng.randint(2, 7)]) if cfg["arch"] == "encoder-decoder" else S
    nprng = np.random.RandomState(rng.randint(0, 2**31))
    files = {}

    def seq(n):
        if cfg.get("vocab"):
            return nprng.randint(0, cfg["vocab"], size=(B, n)).astype(np.int32)
        return nprng.standard_normal((B, n, cfg["d_model"])).astype(np.float32)

    np.save(os.path.join(d, "in.npy"), seq(S))
    files["--input"] = os.path.join(d, "in.npy")
    lengths = np.array([S] + [rng.randint(1, S) for _ in range(B - 1)], dtype=np.int32)
    nprng.shuffle(lengths)
    np.save(os.path.join(d, "len.npy"), lengths)
    files["--lengths"] = os.path.join(d, "len.npy")
    if cfg["arch"] == "encoder-decoder":
        np.save(os.path.join(d, "tgt.npy"), seq(T))
        files["--target-input"] = os.path.join(d, "tgt.npy")
    return files, lengths
