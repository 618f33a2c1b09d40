#!/usr/bin/python3
"""The one schema (include/ff_schema.h): what `fixformer info --schema` prints
is what every consumer does.  One named case each:

  validate_follows_the_schema
      for every key of `info --schema`: a required one left out, a value
      below min or above max, a word not among the values, a wrong type, a
      string one character too long are refused naming the key (the longest
      string accepted); each condition a key needs, broken, refuses it with
      its words ("given but ..."); a key for other architectures is refused;
      a default left out is what `info` prints;
  weights_follow_the_schema
      for descriptions covering every weight kind: the tensors `info` lists
      (names, order, shapes) are the weight rows of `info --schema` whose
      needs hold, expanded by scope and layer as the JSON says;
  info_reads_back
      `info`'s resolved description, read back, resolves to the same text;
  init_byte_identical
      `init --seed 1` of those descriptions gives the bytes the code before
      the schema gave (sha256), so the order of the tensors and of the draws
      is the same;
  attention_bias_without_ffn_biases
      `bias = false, attention_bias = true`: q, k, v and out biases, a
      feed-forward without; runtime and tcc equal PyTorch's
      nn.TransformerEncoder with its feed-forward biases zero;
  exporter_schema_current, docs_key_table_current
      python/fixformer_schema.json is `info --schema`, and the key table of
      docs/model-description.md is `info --schema --markdown`
      (scripts/gen_schema.py writes both).

  schema.py --fixformer BIN [--case NAME]
"""
import hashlib
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(HERE, "lib"))
import cases  # noqa: E402
import gen_schema  # noqa: E402
from configs import lua_value as lua  # noqa: E402

# Descriptions that have every weight kind between them (and every condition both ways).
MODELS = {
    "enc": 'name = "enc", d_model = 16, heads = 2, d_ff = 24, layers = 2, vocab = 20, positional = "sinusoidal", '
           'max_seq = 8',
    "bert": 'name = "bert", d_model = 16, heads = 4, d_ff = 32, layers = 2, activation = "gelu", eps = 1e-12, '
            'vocab = 30, positional = "learned", max_seq = 12, scale_embeddings = false, token_types = 2, '
            'embed_norm = true, lm_head = false',
    "encdec": 'name = "encdec", arch = "encoder-decoder", d_model = 24, heads = 6, kv_heads = 2, d_ff = 20, '
              'encoder_layers = 2, decoder_layers = 3, final_norm = true, norm = "pre", activation = "gelu_tanh", '
              'vocab = 25, positional = "learned", max_seq = 10, tie_embeddings = false, head_bias = true, '
              'prefix = "model.", lm_head_weight = "out.weight", lm_head_bias = "out.bias", '
              'pos_embed_weight = "pe.weight", embed_weight = "tok.weight"',
    "llama": 'name = "llama", arch = "decoder-only", d_model = 16, heads = 4, kv_heads = 1, d_ff = 20, layers = 2, '
             'norm = "pre", norm_kind = "rmsnorm", final_norm = true, activation = "swiglu", bias = false, '
             'vocab = 40, positional = "rope", rope_pairing = "interleaved", rope_theta = 500000, '
             'scale_embeddings = false, tie_embeddings = false, max_seq = 16',
    "floats": 'name = "floats", arch = "encoder-decoder", d_model = 12, heads = 3, layers = 1, norm_kind = "rmsnorm", '
              'activation = "swiglu", bias = false, final_norm = true, max_seq = 6',
    "dec": 'name = "dec", arch = "decoder-only", d_model = 8, heads = 2, layers = 1, norm_kind = "rmsnorm", '
           'vocab = 11, token_types = 3, token_type_embed_weight = "tt.weight", embed_norm = true, head_bias = true, '
           'max_seq = 5',
    "scaled": 'name = "scaled", arch = "encoder-decoder", d_model = 8, heads = 2, layers = 1, vocab = 9, '
              'max_seq = 4, layer_scale = true',
}
# sha256 of `init --seed 1` of MODELS, by the code before include/ff_schema.h (92a0d37)
INIT_SHA256 = {
    "enc": "a5435457324b2cd669b7c6aea29d9aa74d00f66b48876296314d3111f27a1a87",
    "bert": "93d5b63f6679181605f72d72c6ce69bc3edbf9a2cda88435a5a0bc817fdb6a51",
    "encdec": "59169a5c0da3cad3c35b9494f6230053cc12bd21f1fd6762e06e3dfd2cd38021",
    "llama": "86b19f7616fa33ac308dc7e0ef4795cd92be3cd779602b599d4acbe580420ece",
    "floats": "bc0345196554891dd6f5e6e8e7ed5c46c8fc89b81f5fdcd73230adc6e4b24d9f",
    "dec": "df4821c1dfb36a8885b5897254dd13b31527ab8b2142fc4cae13dba4a9ce1a8d",
}


class Ctx:
    def __init__(self, ff, tmp):
        self.ff, self.tmp = ff, tmp
        self.env = dict(os.environ, HOME=tmp, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
        self.schema = json.loads(self.run("info", "--schema").stdout)
        self.keys = {k["key"]: k for k in self.schema["keys"]}
        self.conds = {c["name"]: c for c in self.schema["conditions"]}
        self.n = 0

    def run(self, *args, check=True):
        p = subprocess.run([self.ff, *args], capture_output=True, text=True, env=self.env, timeout=60)
        if check and p.returncode:
            raise AssertionError("fixformer %s: exit %d: %s" % (" ".join(args), p.returncode, p.stderr.strip()))
        return p

    def write(self, fields, name=None):
        """a description of fields ({key: Lua text}) -> its path"""
        self.n += 1
        path = os.path.join(self.tmp, (name or "d%d" % self.n) + ".lua")
        with open(path, "w") as f:
            f.write("return { %s }\n" % ", ".join("%s = %s" % kv for kv in fields.items()))
        return path

    def info(self, fields):
        """info's exit status and its stdout or stderr line"""
        p = self.run("info", self.write(fields), check=False)
        return p.returncode, (p.stdout if p.returncode == 0 else p.stderr.strip())


BASE = {"name": '"s"', "d_model": "8", "heads": "2", "layers": "1"}


def holding(c, cond):
    """the fields that make a condition hold"""
    key = c.keys[cond["key"]]
    v = {"set": max(1, key.get("min", 1)), "true": True, "false": False}.get(cond["test"], cond.get("value"))
    return {cond["key"]: lua(v)}


def breaking(c, cond):
    """the fields that make a condition fail, and the value the message shows"""
    key = c.keys[cond["key"]]
    if cond["test"] == "set":
        return ({}, "nil") if key.get("default") is None else ({cond["key"]: "0"}, "0")
    if cond["test"] in ("true", "false"):
        v = cond["test"] == "false"
        return {cond["key"]: lua(v)}, lua(v)
    other = next(x for x in key["values"] if x != cond["value"])
    return {cond["key"]: lua(other)}, lua(other)


def context(c, needs, skip=None):
    fields = dict(BASE)
    for n in needs:
        if n != skip:
            fields.update(holding(c, c.conds[n]))
    return fields


def info_value(text, key):
    m = re.search(r"\n  %s = ([^\n]*?),(  --[^\n]*)?\n" % re.escape(key), text)
    return m and m.group(1)


def validate_follows_the_schema(c):
    checked = 0
    for key, k in c.keys.items():
        kind, fields = k["kind"], context(c, k["needs"])
        if "arches" in k and len(k["arches"]) < 3:
            fields = dict(fields, arch=lua(k["arches"][0]))
        bad = []
        if k.get("required"):
            code, out = c.info({f: v for f, v in fields.items() if f != key})
            assert code and out.endswith(": %s: required" % key), "%s left out: %s" % (key, out)
        if kind == "int":
            bad += [(k["min"] - 1, "must be"), (k["max"] + 1, "%d is above the limit %d" % (k["max"] + 1, k["max"]))]
        elif kind == "number":
            bad += [(k["min"], "must be > "), (k["max"] * 2, "is above the limit")]
        elif kind == "enum":
            bad += [("bogus", '"bogus" is not one of %s' % ", ".join(k["values"]))]
        elif kind == "boolean":
            bad += [(1, "expected true or false")]
        else:
            bad += [("x" * (k["maxlen"] + 1), "")]
            code, out = c.info(dict(fields, **{key: lua("x" * k["maxlen"])}))
            assert code == 0, "%s of %d characters refused: %s" % (key, k["maxlen"], out)
        for v, words in bad:
            code, out = c.info(dict(fields, **{key: lua(v)}))
            assert code and ": %s: " % key in out and words in out, "%s = %r: %s" % (key, v, out)
        for n in k["needs"]:  # each condition broken: the key (or one the context gives) is refused with its words
            cond = c.conds[n]
            broken, shown = breaking(c, cond)
            given = dict(context(c, k["needs"], skip=n), **broken)
            if kind == "enum":
                given[key] = lua(k["values"][0])
            elif kind == "boolean":
                given[key] = "true"
            elif kind in ("int", "number"):
                given[key] = lua(k["min"] + 1)
            else:
                given[key] = lua("x")
            code, out = c.info(given)
            want = "given but " + (cond.get("why") or "%s is %s" % (cond["key"], shown))
            assert code and out.endswith(want), "%s without %s: %s (wanted ...%s)" % (key, n, out, want)
        for arch in set(c.keys["arch"]["values"]) - set(k["arches"]):
            code, out = c.info(dict(context(c, k["needs"]), arch=lua(arch), **{key: "1"}))
            assert code and ": %s: only for arch" % key in out, "%s for %s: %s" % (key, arch, out)
        if "default" in k or "default_of" in k:  # left out: info prints the default
            code, out = c.info(fields)
            got = info_value(out, key)
            want = lua(k["default"]) if "default" in k else None
            if "default_of" in k:  # times the key's resolved value (layers: as given)
                want = info_value(out, k["default_of"]) or fields.get(k["default_of"])
                want = want if k["times"] == 1 else str(k["times"] * int(want))
            if got is not None:
                same = float(got) == float(want) if kind == "number" else got == want
                assert same, "%s left out: info prints %s, the schema's default is %s" % (key, got, want)
                checked += 1
    return "%d keys refused out of their bounds and conditions; %d defaults as info prints them" % (
        len(c.keys), checked)


def expected_tensors(c, fields):
    """the tensors of a description from the JSON's weight rows, and as info lists them: [(name, shape)] each"""
    code, text = c.info(fields)
    assert code == 0, text
    cfg = {}
    for line in text.split("-- weights:")[0].split("\n"):
        m = re.match(r"  (\w+) = (.*?),(  --.*)?$", line)
        if m:
            v = m.group(2)
            cfg[m.group(1)] = v[1:-1] if v.startswith('"') else {"true": True, "false": False, "nil": None}.get(v, v)
    arch = cfg["arch"]
    num = {k: int(v) for k, v in cfg.items() if isinstance(v, str) and re.fullmatch(r"\d+", v)}
    enc = num.get("encoder_layers", num.get("layers") if arch == "encoder" else 0)
    dec = num.get("decoder_layers", num.get("layers") if arch == "decoder-only" else 0)
    dk = num["d_model"] // num["heads"]
    dims = {"d_model": num["d_model"], "d_ff": num["d_ff"], "kv": num["kv_heads"] * dk,
            "qkv": num["d_model"] + 2 * num["kv_heads"] * dk, "vocab": num.get("vocab", 0),
            "max_seq": num["max_seq"], "token_types": num.get("token_types", 0),
            "up": num["d_ff"] * (2 if cfg["activation"] == "swiglu" else 1)}

    def holds(n):
        cond = c.conds[n]
        v = cfg.get(cond["key"])
        return {"set": v not in (None, "0", 0), "true": v is True, "false": v is False}.get(
            cond["test"], v == cond.get("value"))

    def defaults(key):
        return cfg.get(key, c.keys[key].get("default"))

    out = []

    def scope(names, stack, layer):
        for w in c.schema["weights"]:
            if w["scope"] in names and all(holds(n) for n in w["needs"]):
                if "named_by" in w:
                    name = defaults(w["named_by"])
                else:
                    pre = "" if stack is None else defaults("prefix") + (stack if arch == "encoder-decoder" else "")
                    name = pre + ("layers.%d." % layer if layer is not None else "") + w["role"]
                out.append((name, [dims[d] for d in w["shape"]]))

    scope(["embeddings"], None, None)
    for stack, n, cross in (("encoder.", enc, False), ("decoder.", dec, arch == "encoder-decoder")):
        for i in range(n):
            scope(["layer", "cross"] if cross else ["layer"], stack, i)
        if n:
            scope(["stack"], stack, None)
    scope(["head"], None, None)
    listed = [(m.group(1), [int(x) for x in m.group(2).split(", ")])
              for m in re.finditer(r"\n--   (\S+)\s+\[([\d, ]+)\]", text)]
    return out, listed


def fields_of(text):
    return dict(kv.split(" = ", 1) for kv in re.split(r",\s*", text.strip()))


def weights_follow_the_schema(c):
    total, names = 0, []
    for name, text in MODELS.items():
        want, got = expected_tensors(c, fields_of(text))
        assert want == got, "%s: info lists %s, the schema %s" % (name, got, want)
        total += len(got)
        names += [n for n, _ in got]
    missing = [w["role"] for w in c.schema["weights"]  # every kind named by its role in some model
               if "named_by" not in w and not any(n.endswith("." + w["role"]) or n == w["role"] for n in names)]
    assert not missing, "kinds no model has: %s" % missing
    return "%d descriptions, %d tensors as the weight rows say" % (len(MODELS), total)


def info_reads_back(c):
    for name, text in MODELS.items():
        first = c.info(fields_of(text))[1]
        path = os.path.join(c.tmp, "back_%s.lua" % name)
        with open(path, "w") as f:
            f.write(first.split("-- weights:")[0].split("\n", 1)[1])
        second = c.run("info", path).stdout
        assert first.split("\n", 1)[1] == second.split("\n", 1)[1], "%s: info of info differs" % name
    return "%d descriptions" % len(MODELS)


def init_byte_identical(c):
    got = {}
    for name, text in MODELS.items():
        if name not in INIT_SHA256:  # a model of keys added since: nothing from before to compare with
            continue
        out = os.path.join(c.tmp, name + ".safetensors")
        c.run("init", c.write(fields_of(text), "init_" + name), "-o", out, "--seed", "1")
        with open(out, "rb") as f:
            got[name] = hashlib.sha256(f.read()).hexdigest()
    diff = [n for n in got if got[n] != INIT_SHA256[n]]
    assert not diff, "init differs for %s: %s" % (diff, {n: got[n] for n in diff})
    return "%d weight files as before" % len(got)


def attention_bias_without_ffn_biases(c):
    import numpy as np
    import torch
    import torch.nn as nn
    from reference import read_safetensors, write_safetensors
    d, h, ff, L, T = 16, 2, 24, 2, 6
    lua = c.write({"name": '"ab"', "d_model": d, "heads": h, "d_ff": ff, "layers": L, "norm": '"pre"',
                   "final_norm": "true", "bias": "false", "attention_bias": "true", "max_seq": 8}, "ab")
    w, x_path, y_path = (os.path.join(c.tmp, f) for f in ("ab.safetensors", "ab_x.npy", "ab_y.npy"))
    c.run("init", lua, "-o", w, "--seed", "3")
    t = read_safetensors(w)
    biases = sorted(n for n in t if n.endswith("bias") and "norm" not in n)
    assert biases == ["layers.%d.self_attn.%s" % (i, b) for i in range(L) for b in ("in_proj_bias", "out_proj.bias")], \
        "init wrote the biases %s" % biases
    gen = torch.Generator().manual_seed(0)
    for n in biases:  # init's are zero: make them count
        t[n] = 0.3 * torch.randn(t[n].shape, generator=gen).numpy()
    write_safetensors(w, t)
    layer = nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, batch_first=True, norm_first=True)
    model = nn.TransformerEncoder(layer, L, norm=nn.LayerNorm(d), enable_nested_tensor=False).eval()
    sd = {n: torch.from_numpy(v) for n, v in t.items()}
    for i in range(L):
        for n, rows in (("linear1.bias", ff), ("linear2.bias", d)):
            sd["layers.%d.%s" % (i, n)] = torch.zeros(rows)
    model.load_state_dict(sd, strict=True)
    x = torch.randn(2, T, d, generator=gen)
    with torch.no_grad():
        want = model(x).numpy()
    np.save(x_path, x.numpy())
    errs = []
    for engine in ("runtime", "tcc"):
        c.run("run", lua, "--weights", w, "--input", x_path, "--output", y_path, "--engine", engine)
        errs.append(float(np.abs(np.load(y_path) - want).max() / np.abs(want).max()))
        assert errs[-1] < 1e-4, "%s: %g from PyTorch" % (engine, errs[-1])
    return "%d attention biases, none in the feed-forward; runtime %.1e, tcc %.1e from PyTorch" % (
        len(biases), errs[0], errs[1])


def exporter_schema_current(c):
    with open(gen_schema.JSON, encoding="utf-8") as f:
        assert f.read() == c.run("info", "--schema").stdout, \
            "python/fixformer_schema.json is not `fixformer info --schema`: run scripts/gen_schema.py"
    return "python/fixformer_schema.json is `info --schema`"


def docs_key_table_current(c):
    with open(gen_schema.DOCS, encoding="utf-8") as f:
        docs = f.read()
    table = c.run("info", "--schema", "--markdown").stdout
    assert table in docs and docs == gen_schema.docs_with_table(docs, table), \
        "docs/model-description.md's key table is not `fixformer info --schema --markdown`: run scripts/gen_schema.py"
    return "%d rows" % (table.count("\n") - 2)


CASES = [validate_follows_the_schema, weights_follow_the_schema, info_reads_back, init_byte_identical,
         attention_bias_without_ffn_biases, exporter_schema_current, docs_key_table_current]


if __name__ == "__main__":
    sys.exit(cases.main("schema", __doc__, CASES, Ctx))
