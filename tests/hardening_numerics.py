#!/usr/bin/python3
"""Hardening round 3, the numbers (issue 22 items 6, 10, 11).  One named case
per fault and sibling:

  rope_table_bounded, sinusoidal_table_bounded
      a model of max_seq 2^20 (a few KB of weights) packs a table of the
      positions of a few hundred KB, not max_seq rows: `emit --weights` and
      the tcc / cc packed-weight cache under 1 MiB, `emit --embed`'s C under
      4 MiB (64 MiB, 151 MiB and over a GiB before);
  rope_high_positions, sinusoidal_high_positions
      the emitted kernel (the model's .c and .weights, called by a harness
      that includes the .c; built with cc, tcc and, where the cross compiler
      and qemu are, for i686 with x87 excess precision) at the first 4096
      positions, the last 64 of 2^20 and random ones between, against the
      formulas in double: RoPE rotates by cos and sin of the runtime's float32
      angle fl(pos * f_i);
  rope_model_positions, sinusoidal_model_positions
      those models over 2048 positions (peaked q/k) on tcc and cc against the
      runtime, within the numerics contract (1e-5);
  int8_tiny_groups_stored, int8_tiny_groups_computed
      int8 groups whose max|w| is 1e-44 .. 1e-38 (a subnormal scale): every
      stored q in [-127, 127] with w's sign, and the logits on runtime, tcc and
      cc those of the same weights in float32 (an exactly representable model);
  description_undefined_name
      a description that reads a name it never set (`activation = gelu`,
      `eps = inf`, `math.inf`) fails naming the file, line and name; NaN and
      a float32 0 are refused too;
  exporter_refuses_out_of_schema, exporter_schema_matches_validate
      python/fixformer_export.py raises for values fixformer refuses (eps inf,
      NaN, 0, 2, 1e-300, max_seq 2^21) and writes nothing; its schema is
      the one validate.lua checks against (include/ff_schema.h, `info --schema`);
  descriptions_read_back_exactly
      `info` prints eps and rope_theta so they read back as the same float32,
      `import` as the same double.

  hardening_numerics.py --fixformer BIN [--case NAME]
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, os.path.join(ROOT, "python"))
import cases  # noqa: E402
from reference import read_safetensors, write_safetensors  # noqa: E402

MIB = 1 << 20
MAX_SEQ = 1 << 20
ROPE = ('return { name = "big_rope", arch = "decoder-only", d_model = 32, heads = 2, kv_heads = 1, d_ff = 48,\n'
        '  layers = 1, norm = "pre", norm_kind = "rmsnorm", activation = "swiglu", bias = false, vocab = 50,\n'
        '  positional = "rope", rope_theta = 500000, max_seq = %d, weights = "big_rope.safetensors" }\n' % MAX_SEQ)
SINUS = ('return { name = "big_sin", arch = "encoder", d_model = 36, heads = 2, d_ff = 40, layers = 1,\n'
         '  vocab = 50, positional = "sinusoidal", max_seq = %d, weights = "big_sin.safetensors" }\n' % MAX_SEQ)


def run(cmd, env=None, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-2000:]))
    return p


def scaled(a, b):
    return float(np.abs(a - b).max()) / max(float(np.abs(b).max()), 1e-30)


class Ctx:
    def __init__(self, ff, tmp):
        self.ff, self.tmp = ff, tmp
        self.env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
        self.models = {}

    def model(self, text, peaked=False):
        """text's description and init weights in tmp (q/k rows of in_proj x5 when peaked): its path."""
        name = re.search(r'name = "(\w+)"', text).group(1)
        if name not in self.models:
            lua = os.path.join(self.tmp, name + ".lua")
            with open(lua, "w") as f:
                f.write(text)
            w = os.path.join(self.tmp, name + ".safetensors")
            run([self.ff, "init", lua, "-o", w, "--seed", "5"], env=self.env)
            if peaked:  # N(0, 0.1) queries and keys: a wrong rotation shows (DESIGN.md, pitfalls)
                t = read_safetensors(w)
                for k in t:
                    if k.endswith("in_proj_weight"):
                        t[k][:48] *= 5
                write_safetensors(w, t)
            self.models[name] = lua
        return self.models[name]


# ---- item 6: the tables of the positions ---------------------------------------------------

def table_bounded(c, text):
    lua = c.model(text)
    name = os.path.basename(lua)[:-4]
    out = os.path.join(c.tmp, name + "_out")
    run([c.ff, "emit", lua, "-o", out, "--weights", lua[:-4] + ".safetensors"], env=c.env)
    size = os.path.getsize(os.path.join(out, name + ".weights"))
    assert size < MIB, "%s.weights is %d bytes for a model of max_seq 2^20 (a table per position?)" % (name, size)
    emb = os.path.join(c.tmp, name + "_embed")
    run([c.ff, "emit", lua, "-o", emb, "--weights", lua[:-4] + ".safetensors", "--embed"], env=c.env)
    esize = os.path.getsize(os.path.join(emb, name + "_weights.c"))
    assert esize < 4 * MIB, "%s_weights.c is %d bytes" % (name, esize)
    blobs = {}
    for engine in ("tcc", "cc"):
        run([c.ff, "run", lua, "--tokens", "1 2 3", "--output", os.path.join(c.tmp, "o.npy"), "--engine", engine],
            env=c.env)
        for d, _, files in os.walk(os.path.join(c.tmp, "cache")):
            for f in files:
                if f.endswith(".blob"):
                    blobs[f] = os.path.getsize(os.path.join(d, f))
    assert blobs and max(blobs.values()) < MIB, "packed weights in the cache: %s" % blobs
    return "weights %d bytes, --embed %d bytes, cached blob %d bytes" % (size, esize, max(blobs.values()))


def rope_table_bounded(c):
    return table_bounded(c, ROPE)


def sinusoidal_table_bounded(c):
    return table_bounded(c, SINUS)


HARNESS = r"""
#include <stdio.h>
#include <stdlib.h>
#include "MODEL.c" /* the emitted model: its static kernels and layout */

/* argv: WEIGHTS X POS OUT: rows of x [N, LDX] each through KERNEL at its position */
int main(int argc, char **argv) {
  FILE *f = argc == 5 ? fopen(argv[1], "rb") : NULL;
  long n = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
  float *w = n >= 64 + 4L * TABLE ? malloc((size_t)n) : NULL;
  if (!w || fseek(f, 0, SEEK_SET) || fread(w, 1, (size_t)n, f) != (size_t)n) return 2;
  fclose(f);
  FILE *fx = fopen(argv[2], "rb"), *fp = fopen(argv[3], "rb"), *fo = fopen(argv[4], "wb");
  float x[LDX];
  int pos;
  while (fread(x, sizeof x, 1, fx) == 1 && fread(&pos, sizeof pos, 1, fp) == 1) {
    KERNEL(x, 1, w + 16 + TABLE, pos); /* past the blob's 64-byte header */
    fwrite(x, sizeof x, 1, fo);
  }
  return fclose(fo) != 0;
}
"""


def positions():
    rng = np.random.default_rng(7)
    return np.concatenate([np.arange(4096), MAX_SEQ - 64 + np.arange(64),
                           rng.integers(4096, MAX_SEQ - 64, 192)]).astype(np.int32)


def emitted_kernel(c, text, kind, x, pos):
    """x [N, LDX] through the emitted model's kernel of kind at pos (cc and tcc builds)."""
    lua = c.model(text)
    name = os.path.basename(lua)[:-4]
    out = os.path.join(c.tmp, name + "_out")
    run([c.ff, "emit", lua, "-o", out, "--weights", lua[:-4] + ".safetensors"], env=c.env)
    with open(os.path.join(out, name + ".c")) as f:
        src = f.read()
    fn = re.search(r"\nstatic void (%s_\w+)\(float \*" % kind, src).group(1)
    table = int(re.search(r"\n  W_%s\s+= (\d+)," % kind.upper(), src).group(1))
    with open(os.path.join(out, "harness.c"), "w") as f:
        f.write(HARNESS.replace("MODEL", name))
    x.astype("<f4").tofile(os.path.join(out, "x.bin"))
    pos.astype("<i4").tofile(os.path.join(out, "pos.bin"))
    builds = [("cc", ["cc", "-O2", "-std=c99"], []), ("tcc", ["tcc", "-std=c99"], [])]
    if shutil.which("i686-linux-gnu-gcc") and shutil.which("qemu-i386"):  # x87, excess precision (GNU C)
        builds.append(("i686", ["i686-linux-gnu-gcc", "-O2", "-std=gnu99", "-mfpmath=387", "-static"], ["qemu-i386"]))
    got = {}
    for tag, cc, runner in builds:
        exe = os.path.join(out, "harness_" + tag)
        run(cc + ["-I", out, "-DKERNEL=" + fn, "-DTABLE=%d" % table, "-DLDX=%d" % x.shape[1], "-o", exe,
                  os.path.join(out, "harness.c"), "-lm"])
        run(runner + [exe, os.path.join(out, name + ".weights"), os.path.join(out, "x.bin"),
                      os.path.join(out, "pos.bin"), os.path.join(out, "y.bin")])
        got[tag] = np.fromfile(os.path.join(out, "y.bin"), "<f4").reshape(x.shape)
    return got


def rope_high_positions(c):
    d, heads, kv, dk, theta = 32, 2, 1, 16, 500000.0
    ldx = d + 2 * kv * dk
    pos = positions()
    x = np.random.default_rng(1).standard_normal((len(pos), ldx)).astype(np.float32)
    got = emitted_kernel(c, ROPE, "rope", x, pos)
    half = dk // 2
    # the runtime's angle: inv_freq = float32(theta^(-2i/dk)), the product rounded to float32
    inv = (1.0 / theta ** (np.arange(half) * 2.0 / dk)).astype(np.float32)
    ang = (pos.astype(np.float32)[:, None] * inv[None, :]).astype(np.float64)
    cos, sin = np.cos(ang), np.sin(ang)
    want = x.astype(np.float64).copy()
    for h in range(heads + kv):  # q heads then the k head: rotate_half pairs (i, i + half)
        a, b = x[:, h * dk:h * dk + half].astype(np.float64), x[:, h * dk + half:(h + 1) * dk].astype(np.float64)
        want[:, h * dk:h * dk + half] = a * cos - b * sin
        want[:, h * dk + half:(h + 1) * dk] = b * cos + a * sin
    lines = []
    for cc, y in got.items():
        err = float(np.abs(y - want).max() / np.abs(want).max())
        assert err <= 1e-6, "%s build: RoPE %.2e off cos/sin of the runtime's angle (positions to %d)" % (
            cc, err, pos.max())
        lines.append("%s %.1e" % (cc, err))
    return "%d positions up to %d: %s" % (len(pos), pos.max(), ", ".join(lines))


def sinusoidal_high_positions(c):
    d = 36
    pos = positions()
    x = np.random.default_rng(2).standard_normal((len(pos), d)).astype(np.float32)
    got = emitted_kernel(c, SINUS, "sinusoidal", x, pos)
    j = np.arange(d)
    ang = pos[:, None].astype(np.float64) / 10000.0 ** ((j - j % 2) / d)[None, :]
    pe = np.where(j % 2 == 0, np.sin(ang), np.cos(ang)).astype(np.float32)  # the runtime's table, as floats
    want = (x + pe).astype(np.float64)
    lines = []
    for cc, y in got.items():
        err = float(np.abs(y - want).max() / np.abs(want).max())
        assert err <= 1e-6, "%s build: sinusoidal positions %.2e off (positions to %d)" % (cc, err, pos.max())
        lines.append("%s %.1e" % (cc, err))
    return "%d positions up to %d: %s" % (len(pos), pos.max(), ", ".join(lines))


def model_positions(c, text):
    lua = c.model(text, peaked=True)
    ids = os.path.join(c.tmp, "ids.npy")
    np.save(ids, (np.arange(2048) * 7 % 50).reshape(1, 2048).astype(np.int32))
    out = {}
    for e in ("runtime", "tcc", "cc"):
        o = os.path.join(c.tmp, "m_%s.npy" % e)
        run([c.ff, "run", lua, "--input", ids, "--output", o, "--engine", e], env=c.env)
        out[e] = np.load(o)
    errs = {e: scaled(out[e], out["runtime"]) for e in ("tcc", "cc")}
    assert max(errs.values()) <= 1e-5, "2048 positions against the runtime: %s" % errs
    return "positions 0..2047: tcc %.1e, cc %.1e" % (errs["tcc"], errs["cc"])


def rope_model_positions(c):
    return model_positions(c, ROPE)


def sinusoidal_model_positions(c):
    return model_positions(c, SINUS)


# ---- item 10: int8 groups with a subnormal scale ----------------------------------------------

UNIT = 2.0 ** -149  # the least subnormal float
TINY = ('return { name = "tiny8", arch = "encoder", d_model = 32, heads = 1, d_ff = 32, layers = 1, norm = "pre",\n'
        '  norm_kind = "rmsnorm", final_norm = true, activation = "relu", bias = false, vocab = 6,\n'
        '  tie_embeddings = false, scale_embeddings = false, positional = "none", max_seq = 8, dtype = "%s",\n'
        '  weights = "tiny8.safetensors" }\n')


def tiny_weights(path):
    """Every matrix exactly int8 (k / 128, a +-127 in each group of 32) but the head, whose rows are
    tiny groups: max|w| 190 units of 2^-149 (scale 1.5 units: rounded to 1, q 190), 7 units (scale
    rounds to 0), 45 units, ~1e-40, ~1e-38 (scale 562 and 56183 units, q exact), and a normal row.
    The final norm's weight 1e30 brings the head's products into float range."""
    rng = np.random.default_rng(3)

    def exact(rows, cols):
        k = rng.integers(-127, 128, (rows, cols))
        k[:, ::32] = 127 * rng.choice([-1, 1], (rows, (cols + 31) // 32))
        return (k / 128.0).astype(np.float32)

    def units(n, top):
        u = rng.integers(-top, top + 1, 32)
        u[rng.integers(32)] = top * rng.choice([-1, 1])
        return (u * n).astype(np.float64) * UNIT

    head = np.stack([units(2, 95), units(1, 7), units(1, 45), units(562, 127), units(56183, 127),
                     exact(1, 32)[0].astype(np.float64)]).astype(np.float32)
    t = {"embed.weight": exact(6, 32), "layers.0.self_attn.in_proj_weight": exact(96, 32),
         "layers.0.self_attn.out_proj.weight": exact(32, 32), "layers.0.linear1.weight": exact(32, 32),
         "layers.0.linear2.weight": exact(32, 32), "lm_head.weight": head,
         "norm.weight": np.full(32, 1e30, np.float32)}
    for n in ("layers.0.norm1.weight", "layers.0.norm2.weight"):
        t[n] = np.ones(32, np.float32)
    write_safetensors(path, t)
    return t


def tiny_model(c):
    if "tiny8" not in c.models:
        for dtype in ("int8", "f32"):
            with open(os.path.join(c.tmp, "tiny8_%s.lua" % dtype), "w") as f:
                f.write(TINY % dtype)
        c.models["tiny8"] = tiny_weights(os.path.join(c.tmp, "tiny8.safetensors"))
    return c.models["tiny8"]


def int8_tiny_groups_stored(c):
    t = tiny_model(c)
    out = os.path.join(c.tmp, "tiny8_out")
    run([c.ff, "emit", os.path.join(c.tmp, "tiny8_int8.lua"), "-o", out, "--isa", "generic"], env=c.env)
    with open(os.path.join(out, "tiny8.c")) as f:
        at = 4 * int(re.search(r"\n  W_LM_HEAD\s+= (\d+),", f.read()).group(1))
    with open(os.path.join(out, "tiny8.weights"), "rb") as f:
        blob = f.read()[64:]
    nr = 16  # generic panels: NR float scales, then q[k][c] at 4 NR + k NR + c (kernels/quant.c)
    scales = np.frombuffer(blob, "<f4", nr, at)
    q = np.frombuffer(blob, np.int8, 32 * nr, at + 4 * nr).reshape(32, nr)
    head = t["lm_head.weight"]
    bad = []
    for v in range(head.shape[0]):
        qv, w = q[:, v].astype(np.int32), head[v].astype(np.float64)
        if np.abs(qv).max() > 127:
            bad.append("row %d: q %d outside [-127, 127]" % (v, np.abs(qv).max()))
        deq = qv * np.float64(scales[v])
        wrong = np.sign(deq) * np.sign(w) < 0
        if wrong.any() or deq[np.argmax(np.abs(w))] == 0:
            bad.append("row %d (max|w| %.3g, scale %.3g): w %s stored as %s" % (
                v, np.abs(w).max(), scales[v], w[wrong][:3] if wrong.any() else w[:3], deq[wrong][:3]))
    assert not bad, "; ".join(bad)
    return "scales %s; every q in [-127, 127], signs kept" % " ".join("%.3g" % s for s in scales[:6])


def int8_tiny_groups_computed(c):
    tiny_model(c)
    ids = "0 1 2 3 4 5 1 3"
    ref = os.path.join(c.tmp, "t8_ref.npy")
    run([c.ff, "run", os.path.join(c.tmp, "tiny8_f32.lua"), "--tokens", ids, "--output", ref, "--engine",
         "runtime"], env=c.env)
    want = np.load(ref)[0]
    lines = []
    for e in ("runtime", "tcc", "cc"):
        o = os.path.join(c.tmp, "t8_%s.npy" % e)
        run([c.ff, "run", os.path.join(c.tmp, "tiny8_int8.lua"), "--tokens", ids, "--output", o, "--engine", e],
            env=c.env)
        got = np.load(o)[0]
        errs = [scaled(got[:, v], want[:, v]) for v in range(want.shape[1])]  # each row's own magnitude
        assert max(errs) <= 1e-4, "%s: int8 logits per head row off the float32 ones by %s" % (
            e, " ".join("%.2g" % x for x in errs))
        lines.append("%s %.1e" % (e, max(errs)))
    return "logits of rows with max|w| 2.7e-43 .. 1e-38 as float32's: " + ", ".join(lines)


# ---- item 11: descriptions and the values written into them ---------------------------------------

def description_undefined_name(c):
    head = 'return { name = "m", d_model = 8, heads = 2, layers = 1,\n'
    cases = [("activation = gelu", ["d.lua:2: undefined name 'gelu'", 'quotes']),
             ("eps = inf", ["d.lua:2: undefined name 'inf'"]),
             ("eps = math.inf", ["d.lua:2: undefined name 'math.inf'"]),
             ('activation = ("gelu"):upperr()', ["d.lua:2: undefined name 'string.upperr'"]),
             ("eps = 0/0", ["d.lua: eps: expected a number, got NaN"]),
             ("eps = 1e-300", ["d.lua: eps: 1e-300 is 0 as a float32"]),
             ("eps = math.huge", ["d.lua: eps: inf is above the limit 1"])]
    for body, pieces in cases:
        path = os.path.join(c.tmp, "d.lua")
        with open(path, "w") as f:
            f.write(head + "  " + body + " }\n")
        for cmd in (["info", path], ["run", path, "--input", os.path.join(c.tmp, "none.npy"), "--output",
                                     os.path.join(c.tmp, "none_out.npy")]):
            p = run([c.ff] + cmd, env=c.env, check=False, cwd=c.tmp)
            err = p.stderr.strip()
            ok = p.returncode not in (0,) and p.returncode < 126 and len(err.splitlines()) == 1 and \
                all(x in err for x in pieces) and not os.path.exists(os.path.join(c.tmp, "none_out.npy"))
            assert ok, "%r (%s): exit %d, %r" % (body, cmd[0], p.returncode, err)
    # names set by the description itself, and the libraries' own, still read
    with open(os.path.join(c.tmp, "d.lua"), "w") as f:
        f.write('local act = "gelu"\nw = 4 * 2\n' + head + '  activation = act, d_ff = w + math.floor(string.len("ab")) }\n')
    p = run([c.ff, "info", os.path.join(c.tmp, "d.lua")], env=c.env)
    assert 'activation = "gelu"' in p.stdout and "d_ff = 10," in p.stdout, p.stdout
    return "%d descriptions refused naming the file, line and name" % len(cases)


def exporter():
    spec = importlib.util.spec_from_file_location("fixformer_export", os.path.join(ROOT, "python",
                                                                                    "fixformer_export.py"))
    fx = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fx)
    return fx


def exporter_refuses_out_of_schema(c):
    import torch.nn as nn
    fx = exporter()
    refused = []
    for eps in (float("inf"), float("nan"), 0.0, -1e-5, 2.0, 1e-300):
        layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, layer_norm_eps=eps)
        out = os.path.join(c.tmp, "export_%d" % len(refused))
        try:
            fx.export(layer, out, "m")
            raise AssertionError("eps = %r: exported" % eps)
        except fx.ExportError as e:
            assert str(e).startswith("eps: "), str(e)
            assert not os.path.exists(out) or not os.listdir(out), "eps = %r: wrote %s" % (eps, os.listdir(out))
            refused.append(repr(eps))
    m = nn.Module()
    m.layers = nn.ModuleList([nn.TransformerEncoderLayer(8, 2, 16, batch_first=True)])
    m.tok, m.pos = nn.Embedding(5, 8), nn.Embedding(MAX_SEQ * 2, 8)
    try:
        fx.describe(m, tie_embeddings=True)
        raise AssertionError("max_seq 2^21: described")
    except fx.ExportError as e:
        assert str(e).startswith("max_seq: 2097152"), str(e)
    # and a good one still exports, its eps read back exactly
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, layer_norm_eps=1.2345678901234567e-6)
    lua = fx.export(layer, os.path.join(c.tmp, "export_ok"), "m")
    with open(lua) as f:
        text = f.read()
    assert float(re.search(r"eps\s*= (\S+),", text).group(1)) == 1.2345678901234567e-6, text
    run([c.ff, "info", lua], env=c.env)
    return "eps %s and max_seq 2^21 refused, nothing written" % ", ".join(refused)


def exporter_schema_matches_validate(c):
    # the schema validate.lua checks against is include/ff_schema.h's, which `info --schema` prints
    fx = exporter()
    keys = json.loads(run([c.ff, "info", "--schema"], env=c.env).stdout)["keys"]
    lua = {}
    for k in keys:
        entry = [k["kind"]]
        if k["kind"] == "enum":
            entry.append(tuple(k["values"]))
        entry += [k[b] for b in ("min", "max", "maxlen") if b in k]
        lua[k["key"]] = tuple(entry)
    py = {k: tuple(v) for k, v in fx._SCHEMA.items()}
    assert lua and set(lua) == set(py), "keys: only in validate.lua %s, only in the exporter %s" % (
        sorted(set(lua) - set(py)), sorted(set(py) - set(lua)))
    diff = ["%s: validate.lua %s, exporter %s" % (k, lua[k], py[k]) for k in lua if lua[k] != py[k]]
    assert not diff, "; ".join(diff)
    assert fx._ORDER == [k["key"] for k in keys], "the exporter's key order is not the schema's"
    return "%d keys, the same kinds and bounds" % len(lua)


def descriptions_read_back_exactly(c):
    # info: the resolved description's numbers read back as the config's float32
    path = os.path.join(c.tmp, "rb.lua")
    with open(path, "w") as f:
        f.write('return { name = "rb", d_model = 8, heads = 2, layers = 1, eps = 0.10000001, positional = "rope",\n'
                '  rope_theta = 123456.789 }\n')
    first = run([c.ff, "info", path], env=c.env).stdout
    back = os.path.join(c.tmp, "rb2.lua")
    with open(back, "w") as f:
        f.write(first.split("-- weights:")[0])
    second = run([c.ff, "info", back], env=c.env).stdout

    def nums(text):
        return [np.float32(float(re.search(r"\n  %s = ([^,]+)," % k, text).group(1))) for k in ("eps", "rope_theta")]
    assert nums(first) == nums(second) == [np.float32(0.10000001), np.float32(123456.789)], (
        "info prints %s, which reads back as %s" % (nums(first), nums(second)))
    # import: a Hugging Face config's eps and theta, as the same doubles
    spec = importlib.util.spec_from_file_location("import_checkpoints", os.path.join(HERE, "import_checkpoints.py"))
    ic = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ic)
    cfg, sd = ic.llama_case(11, 16, 2, 2, 24, 1, 40, 16, theta=123456.78901234567)
    cfg["rms_norm_eps"] = 1.2345678901234567e-6
    src = os.path.join(c.tmp, "hf")
    ic.write_hf(src, cfg, sd)
    lua = run([c.ff, "import", src, "-o", os.path.join(c.tmp, "imported")], env=c.env).stdout.strip().splitlines()[-1]
    with open(lua) as f:
        text = f.read()
    got = [float(re.search(r"\n  %s = ([^,]+)," % k, text).group(1)) for k in ("eps", "rope_theta")]
    assert got == [1.2345678901234567e-6, 123456.78901234567], "import wrote %s" % got
    return "info: eps %s, rope_theta %s; import: the config's doubles" % tuple(nums(first))


CASES = [rope_table_bounded, sinusoidal_table_bounded, rope_high_positions, sinusoidal_high_positions,
         rope_model_positions, sinusoidal_model_positions, int8_tiny_groups_stored, int8_tiny_groups_computed,
         description_undefined_name, exporter_refuses_out_of_schema, exporter_schema_matches_validate,
         descriptions_read_back_exactly]


if __name__ == "__main__":
    sys.exit(cases.main("hardening_numerics", __doc__, CASES, Ctx))
