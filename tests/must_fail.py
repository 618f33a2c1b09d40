#!/usr/bin/python3
"""Bad input must fail: each case runs fixformer on a malformed description,
weights file or input and checks that it exits with a status in 1..125 (no
crash, no signal), prints one line on stderr containing the expected pieces,
and leaves no output file.  Also: every --help exits 0.

  must_fail.py --fixformer BIN
"""
import argparse
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from reference import read_safetensors, split_projections, write_safetensors  # noqa: E402
from tools import on_terminal  # noqa: E402

GOOD = """return {
  name = "m", arch = "encoder", d_model = 16, heads = 2, d_ff = 24, layers = 1,
  vocab = 10, positional = "sinusoidal", max_seq = 8,
}
"""


def desc(tmp, name, text):
    path = os.path.join(tmp, name + ".lua")
    with open(path, "w") as f:
        f.write(text)
    return path


def good_with(tmp, name, replace=None, extra=""):
    text = GOOD
    if replace:
        text = text.replace(*replace)
    return desc(tmp, name, text.replace("max_seq = 8,", "max_seq = 8," + extra))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    args = ap.parse_args()
    ff = args.fixformer
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        good = desc(tmp, "good", GOOD)
        weights = os.path.join(tmp, "w.safetensors")
        subprocess.run([ff, "init", good, "-o", weights], check=True)
        raw = open(weights, "rb").read()
        hlen = struct.unpack("<Q", raw[:8])[0]
        header = raw[8:8 + hlen].decode()

        def weights_variant(name, header_text=None, data=None, cut=0):
            h = (header_text if header_text is not None else header).encode()
            h += b" " * (-len(h) % 8)
            body = data if data is not None else raw[8 + hlen:]
            blob = struct.pack("<Q", len(h)) + h + body
            path = os.path.join(tmp, name + ".safetensors")
            with open(path, "wb") as f:
                f.write(blob[:len(blob) - cut] if cut else blob)
            return path

        import json
        hj = json.loads(header)

        def header_without(name):
            j = dict(hj)
            del j[name]
            return json.dumps(j)

        def header_overlap():  # the second tensor's data starts inside the first's
            j = json.loads(header)
            names = sorted(k for k in j if k != "__metadata__")
            a, b = j[names[0]]["data_offsets"], j[names[1]]["data_offsets"]
            j[names[1]]["data_offsets"] = [a[0], a[0] + (b[1] - b[0])]
            return json.dumps(j)

        def header_duplicate():  # the same name twice (JSON allows it; safetensors does not)
            j = json.loads(header)
            name = sorted(k for k in j if k != "__metadata__")[0]
            text = json.dumps(j)
            return text[:-1] + ', "%s": %s}' % (name, json.dumps(j[name]))

        def npy(name, arr):
            path = os.path.join(tmp, name + ".npy")
            np.save(path, arr)
            return path

        tokens = npy("tokens", np.array([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=np.int32))
        floats = desc(tmp, "floats", GOOD.replace("vocab = 10,", ""))  # a model without embeddings
        float_weights = os.path.join(tmp, "wf.safetensors")
        subprocess.run([ff, "init", floats, "-o", float_weights], check=True)
        out = os.path.join(tmp, "out.npy")

        def run_cmd(model, *extra, inp=tokens, w=weights):
            return ["run", model, "--weights", w, "--input", inp, "--output", out] + list(extra)

        junk = os.path.join(tmp, "junk.safetensors")
        with open(junk, "wb") as f:
            f.write(os.urandom(64))
        # a well-formed file whose linear1.weight is [23,16] where the model needs [24,16]
        tensors = read_safetensors(weights)
        tensors["layers.0.linear1.weight"] = tensors["layers.0.linear1.weight"][:23]
        wrong_shape = os.path.join(tmp, "w2.safetensors")
        write_safetensors(wrong_shape, tensors)
        fifo = os.path.join(tmp, "fifo.safetensors")
        os.mkfifo(fifo)
        torch_zip = os.path.join(tmp, "model.pt")  # what torch.save writes: a zip archive
        with open(torch_zip, "wb") as f:
            f.write(b"PK\x03\x04" + os.urandom(60))
        big_junk = os.path.join(tmp, "big.safetensors")  # 4 GiB, sparse: junk must be refused unread
        with open(big_junk, "wb") as f:
            f.write(b"\xff" * 8 + b"junk")
            f.truncate(4 << 30)
        nan_weights = os.path.join(tmp, "wnan.safetensors")
        t_nan = read_safetensors(weights)
        t_nan["layers.0.linear1.weight"] = t_nan["layers.0.linear1.weight"].copy()
        t_nan["layers.0.linear1.weight"][3, 5] = np.nan
        write_safetensors(nan_weights, t_nan)
        odd_name = os.path.join(tmp, "wodd.safetensors")  # an extra tensor whose name holds control characters
        t_odd = read_safetensors(weights)
        t_odd["evil\n\x1b[31mred"] = np.zeros(2, dtype=np.float32)
        write_safetensors(odd_name, t_odd)
        t_missing = read_safetensors(weights)
        del t_missing["layers.0.norm2.bias"]
        missing_weights = os.path.join(tmp, "wmissing.safetensors")
        write_safetensors(missing_weights, t_missing)
        t_extra = read_safetensors(weights)
        t_extra["head.weight"] = np.zeros((10, 16), dtype=np.float32)
        extra_weights = os.path.join(tmp, "wextra.safetensors")
        write_safetensors(extra_weights, t_extra)
        # q/k/v stored apart (as Hugging Face does): one missing, beside the fused tensor, shapes that do not stack
        apart = split_projections(read_safetensors(weights), 16, False)
        t_noq = dict(apart)
        del t_noq["layers.0.self_attn.k_proj.weight"]
        apart_missing = os.path.join(tmp, "wnok.safetensors")
        write_safetensors(apart_missing, t_noq)
        t_both = dict(apart)
        t_both["layers.0.self_attn.in_proj_weight"] = read_safetensors(weights)["layers.0.self_attn.in_proj_weight"]
        apart_both = os.path.join(tmp, "wboth.safetensors")
        write_safetensors(apart_both, t_both)
        t_cut = dict(apart)
        t_cut["layers.0.self_attn.v_proj.weight"] = t_cut["layers.0.self_attn.v_proj.weight"][:, :15]
        apart_cut = os.path.join(tmp, "wcut.safetensors")
        write_safetensors(apart_cut, t_cut)
        headless = good_with(tmp, "k19", ("arch = \"encoder\"", "arch = \"decoder-only\""), " lm_head = false,")
        lines = os.path.join(tmp, "lines.txt")  # line 2 is longer than the dates model's max_seq
        with open(lines, "w") as f:
            f.write("march 5, 1999\n" + "a" * 80 + "\n")
        dates = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "dates.lua")
        cases = [
            ("weights are a FIFO", run_cmd(good, w=fifo), ["fifo.safetensors", "not a regular file"]),
            ("torch.save file", run_cmd(good, w=torch_zip), ["model.pt", "torch.save", "python/fixformer_export.py weights"]),
            ("4 GiB junk weights", run_cmd(good, w=big_junk), ["big.safetensors", "not a safetensors file"]),
            ("non-finite weight", run_cmd(good, w=nan_weights),
             ["layers.0.linear1.weight", "non-finite", "--allow-nonfinite"]),
            ("non-finite weight, emit", ["emit", good, "-o", os.path.join(tmp, "e1"), "--weights", nan_weights],
             ["layers.0.linear1.weight", "--allow-nonfinite"]),
            ("non-finite weight, --embed", ["emit", good, "-o", os.path.join(tmp, "e2"), "--weights", nan_weights,
                                            "--embed", "--allow-nonfinite"], ["--embed cannot write it"]),
            ("int8 with a non-finite weight, runtime", run_cmd(good, "--allow-nonfinite", "--dtype", "int8",
                                                               w=nan_weights),
             ["layers.0.linear1.weight", "not finite", "int8 cannot store it"]),
            ("int8 with a non-finite weight, tcc", run_cmd(good, "--allow-nonfinite", "--dtype", "int8", "--engine",
                                                           "tcc", w=nan_weights),
             ["layers.0.linear1.weight", "not finite", "int8 cannot store it"]),
            ("int8 with a non-finite weight, emit", ["emit", good, "-o", os.path.join(tmp, "e3"), "--weights",
                                                     nan_weights, "--dtype", "int8", "--allow-nonfinite"],
             ["layers.0.linear1.weight", "int8 cannot store it"]),
            ("unknown --dtype", run_cmd(good, "--dtype", "fp8"), ["dtype: 'fp8' is not one of f32, bf16, int8"]),
            ("unknown dtype key", run_cmd(good_with(tmp, "dt1", extra=' dtype = "int4",')), ["dt1.lua: dtype", "int4"]),
            ("control chars, description", run_cmd(desc(tmp, "k18", 'error("a\\nb\\27[31m")\n')),
             ["k18.lua", "a\\nb\\x1b[31m"]),
            ("control chars, tensor name", run_cmd(good, w=odd_name), ["unexpected tensor 'evil\\n\\x1b[31mred'"]),
            ("--lines error, said once", ["generate", dates, "--lines", lines],
             [lines + ":2: text: more than 48 tokens"]),
            ("--beam 0", ["generate", dates, "--text", "5.3.1999", "--beam", "0"],
             ["--beam: the width must be at least 1 (1: greedy)"]),
            ("--beam beyond vocab / 2", ["generate", dates, "--text", "5.3.1999", "--beam", "21"],
             ["--beam 21: at most 20 beams (vocab / 2)"]),
            ("--beam with sampling", ["generate", dates, "--text", "5.3.1999", "--beam", "2", "--top-k", "3"],
             ["--beam searches, it does not sample: drop --top-k"]),
            ("run --text without a vocabulary", ["run", good, "--weights", weights, "--text", "hi"],
             ["--text needs a description with a vocabulary; use --tokens"]),
            ("run --text and --input", run_cmd(good, "--text", "hi"),
             ["give one of --input IN.npy, --tokens \"ids\" or --text \"...\""]),
            ("run --text too long", ["run", dates, "--text", "1999-12-31 " * 10, "--target-tokens", "1"],
             ["text: more than 48 tokens"]),
            ("--isa the --target lacks", ["emit", good, "-o", os.path.join(tmp, "e4"), "--target", "riscv64-linux-gnu",
                                          "--isa", "avx2"], ["--isa avx2: the target riscv64-linux-gnu runs generic"]),
            ("--isa neon for thumb", ["emit", good, "-o", os.path.join(tmp, "e5"), "--target", "thumbv7em-none-eabihf",
                                      "--isa", "neon"], ["--isa neon: the target thumbv7em-none-eabihf runs generic"]),
            ("unknown FIXFORMER_ISA", ["env", "FIXFORMER_ISA=avx9000", ff] + run_cmd(good, "--engine", "tcc"),
             ["FIXFORMER_ISA=avx9000", "not an ISA this machine runs"]),
            ("unknown key", run_cmd(good_with(tmp, "k1", extra=" dmodel = 64,")), ["unknown key 'dmodel'", "k1.lua"]),
            ("wrong type", run_cmd(good_with(tmp, "k2", ("d_model = 16", 'd_model = "16"'))),
             ["d_model", "expected an integer"]),
            ("heads not dividing", run_cmd(good_with(tmp, "k3", ("heads = 2", "heads = 5"))),
             ["heads: 5 does not divide d_model 16"]),
            ("kv_heads not dividing", run_cmd(good_with(tmp, "kv1", ("heads = 2", "heads = 4"), " kv_heads = 3,")),
             ["kv1.lua: kv_heads: 3 does not divide heads 4"]),
            ("kv_heads above heads", run_cmd(good_with(tmp, "kv2", extra=" kv_heads = 4,")),
             ["kv2.lua: kv_heads: 4 is more than heads 2"]),
            ("kv_heads 0", run_cmd(good_with(tmp, "kv3", extra=" kv_heads = 0,")),
             ["kv3.lua: kv_heads: must be positive, got 0"]),
            ("GQA model, full-head weights", run_cmd(good_with(tmp, "kv4", extra=" kv_heads = 1,")),
             ["layers.0.self_attn.in_proj_weight", "shape [48,16] in file, model needs [32,16]"]),
            ("bad rope_pairing", run_cmd(good_with(tmp, "rp1", ('"sinusoidal"', '"rope"'), ' rope_pairing = "meta",')),
             ["rp1.lua: rope_pairing", '"meta" is not one of rotate_half, interleaved']),
            ("rope_pairing without rope", run_cmd(good_with(tmp, "rp2", extra=' rope_pairing = "interleaved",')),
             ["rp2.lua: rope_pairing: given but positional is \"sinusoidal\""]),
            ("negative size", run_cmd(good_with(tmp, "k4", ("d_ff = 24", "d_ff = -4"))), ["d_ff", "must be positive"]),
            ("bad enum", run_cmd(good_with(tmp, "k5", extra=' activation = "tanh",')), ["activation", '"tanh"']),
            ("not a table", run_cmd(desc(tmp, "k6", "return 5\n")), ["must return a table"]),
            ("syntax error", run_cmd(desc(tmp, "k7", "return { name = \n")), ["k7.lua"]),
            ("os in sandbox", run_cmd(desc(tmp, "k8", "os.exit(3)\nreturn {}\n")), ["k8.lua", "os"]),
            ("io in sandbox", run_cmd(desc(tmp, "k9", "local f = io.open('/etc/passwd')\nreturn {}\n")),
             ["k9.lua", "io"]),
            ("require in sandbox", run_cmd(desc(tmp, "k10", "require('os')\nreturn {}\n")), ["k10.lua", "require"]),
            ("endless loop", run_cmd(desc(tmp, "k11", "while true do end\n")), ["k11.lua", "too long"]),
            ("memory bomb", run_cmd(desc(tmp, "k12", "local t = {} for i = 1, 1e9 do t[i] = i end\n")),
             ["k12.lua", "memory"]),
            ("string bomb", run_cmd(desc(tmp, "k13", "return { name = string.rep('x', 1 << 30) }\n")),
             ["k13.lua", "memory"]),
            ("bad identifier", run_cmd(good_with(tmp, "k14", ('name = "m"', 'name = "m; system(1)"'))),
             ["name", "C identifier"]),
            ("bytecode", run_cmd(desc(tmp, "k16", "\x1bLuaT\x00")), ["k16.lua", "binary chunk"]),
            ("deep recursion", run_cmd(desc(tmp, "k17", "local function f(n) return f(n + 1) + 1 end\nreturn f(1)\n")),
             ["k17.lua", "stack overflow"]),
            ("comment injection", run_cmd(good_with(tmp, "k15", extra=' prefix = "*/ int evil; /*",')),
             ["prefix", "no quotes, backslashes, /* or */"]),
            ("missing tensor", run_cmd(good, w=weights_variant("w1", header_without("layers.0.linear1.weight"))),
             ["missing tensor 'layers.0.linear1.weight'"]),
            ("wrong shape", run_cmd(good, w=wrong_shape),
             ["layers.0.linear1.weight", "shape [23,16] in file, model needs [24,16]"]),
            ("truncated", run_cmd(good, w=weights_variant("w3", cut=10)), ["w3.safetensors", "truncated"]),
            ("junk weights", run_cmd(good, w=junk), ["junk.safetensors"]),
            ("token id = vocab", run_cmd(good, inp=npy("t1", np.array([[1, 10]], dtype=np.int32))), ["token id 10"]),
            ("negative token", run_cmd(good, inp=npy("t2", np.array([[-1, 2]], dtype=np.int64))), ["token id -1"]),
            ("length 0", run_cmd(good, "--lengths", npy("l1", np.array([4, 0], dtype=np.int32))), ["lengths[1] = 0"]),
            ("length > T", run_cmd(good, "--lengths", npy("l2", np.array([5, 1], dtype=np.int32))),
             ["lengths[0] = 5"]),
            ("T > max_seq", run_cmd(good, inp=npy("t3", np.zeros((1, 9), dtype=np.int32))), ["max_seq"]),
            ("float input for tokens", run_cmd(good, inp=npy("t4", np.zeros((1, 3), dtype=np.float32))), ["input"]),
            ("wrong rank", run_cmd(good, inp=npy("t5", np.zeros((3,), dtype=np.int32))), ["input", "rank 1"]),
            ("float dtype npy", run_cmd(good, inp=npy("t6", np.zeros((1, 3), dtype=np.float64))), ["dtype"]),
            ("float input, wrong width", run_cmd(floats, inp=npy("t8", np.zeros((1, 3, 15), dtype=np.float32)),
                                                 w=float_weights), ["[B,T,16]"]),
            ("overlapping tensors", run_cmd(good, w=weights_variant("w4", header_overlap())), ["overlap"]),
            ("duplicate tensor", run_cmd(good, w=weights_variant("w5", header_duplicate())), ["twice"]),
            ("missing --weights", ["run", good, "--input", tokens, "--output", out], ["--weights"]),
            ("unknown flag", run_cmd(good, "--frobnicate"), ["--frobnicate"]),
            ("bad engine", run_cmd(good, "--engine", "gpu"), ["--engine", "gpu"]),
            ("unknown command", ["frobnicate"], ["unknown command"]),
            ("cache takes no model", ["cache", good], ["unexpected argument"]),
            # info --weights: a checkpoint checked against the description, the first problem named
            ("info --weights missing", ["info", good, "--weights", missing_weights],
             ["wmissing.safetensors", "'layers.0.norm2.bias'", "missing"]),
            ("info --weights extra", ["info", good, "--weights", extra_weights],
             ["wextra.safetensors", "'head.weight'", "unexpected"]),
            ("info --weights shape", ["info", good, "--weights", wrong_shape],
             ["w2.safetensors", "'layers.0.linear1.weight'", "shape [23,16] in file, model needs [24,16]"]),
            ("info --weights NaN", ["info", good, "--weights", nan_weights],
             ["wnan.safetensors", "'layers.0.linear1.weight'", "1 non-finite value", "element 53"]),
            ("info --weights junk", ["info", good, "--weights", junk], ["junk.safetensors"]),
            # the embedding and output-head keys, and projections stored apart
            ("head_bias without vocab", run_cmd(desc(tmp, "k20", GOOD.replace("vocab = 10,", "head_bias = true,"))),
             ["k20.lua", "head_bias: given but the model has no vocab"]),
            ("lm_head_bias, no head_bias", run_cmd(good_with(tmp, "k21", extra=' lm_head_bias = "b",')),
             ["k21.lua", "lm_head_bias: given but head_bias is false"]),
            ("head_bias, lm_head false", run_cmd(good_with(tmp, "k22", extra=" lm_head = false, head_bias = true,")),
             ["k22.lua", "head_bias: given but lm_head is false"]),
            ("token type name, 0 types", run_cmd(good_with(tmp, "k23", extra=' token_type_embed_weight = "t",')),
             ["k23.lua", "token_type_embed_weight: given but token_types is 0"]),
            ("negative token_types", run_cmd(good_with(tmp, "k24", extra=" token_types = -1,")),
             ["k24.lua", "token_types: must be >= 0, got -1"]),
            ("generate without a head", ["generate", headless, "--weights", weights, "--tokens", "1 2"],
             ["m has lm_head = false", "decoding needs an output head"]),
            ("q/k/v apart, k missing", run_cmd(good, w=apart_missing),
             ["wnok.safetensors", "missing tensor 'layers.0.self_attn.k_proj.weight'",
              "'layers.0.self_attn.q_proj.weight' is there"]),
            ("q/k/v apart and fused", run_cmd(good, w=apart_both),
             ["wboth.safetensors", "'layers.0.self_attn.in_proj_weight' is in the file both fused and apart"]),
            ("q/k/v that do not stack", run_cmd(good, w=apart_cut),
             ["wcut.safetensors", "'layers.0.self_attn.v_proj.weight' [16,15]", "cannot be fused"]),
            ("info --weights, k missing", ["info", good, "--weights", apart_missing],
             ["wnok.safetensors", "missing tensor 'layers.0.self_attn.k_proj.weight'"]),
        ]
        for engine in ("tcc", "cc"):
            cases.append(("token id, engine " + engine,
                          run_cmd(good, "--engine", engine, inp=npy("t7", np.array([[3, 99]], dtype=np.int32))),
                          ["token id 99"]))
        for name, cmd, pieces in cases:
            if os.path.exists(out):
                os.remove(out)
            try:
                argv = cmd if cmd[0] == "env" else [ff] + cmd
                p = subprocess.run(argv, capture_output=True, text=True, timeout=20)
                code, err = p.returncode, p.stderr.strip()
            except subprocess.TimeoutExpired:
                code, err = None, "timed out"
            problems = []
            if code is None or not 1 <= code <= 125:
                problems.append("exit status %s" % code)
            if not err or len(err.splitlines()) != 1:
                problems.append("stderr is not one line: %r" % err[:300])
            problems += ["message lacks %r" % piece for piece in pieces if piece not in err]
            doubled = re.search(r"fixformer (\w+): \1: ", err)  # the command named once, by main
            if doubled:
                problems.append("the prefix %r twice" % doubled.group(1))
            if os.path.exists(out):
                problems.append("left %s behind" % out)
            failures += bool(problems)
            print("%-26s %s  [%s]" % (name, "ok" if not problems else "FAIL: " + "; ".join(problems), err[:150]))
        # a header 0x580 bytes long starts 80 05 00 ..., a pickle's first bytes: still safetensors
        small = desc(tmp, "small", GOOD.replace("vocab = 10,", "bias = false,"))  # 8 tensors: a short header
        small_weights = os.path.join(tmp, "ws.safetensors")
        subprocess.run([ff, "init", small, "-o", small_weights], check=True)
        t = read_safetensors(small_weights)
        pickle_like = os.path.join(tmp, "w6.safetensors")
        for pad in range(0, 0x580):  # __metadata__ grows the header to 0x580 bytes: 80 05 00 ...
            write_safetensors(pickle_like, t, metadata={"pad": "x" * pad})
            if open(pickle_like, "rb").read(2) == b"\x80\x05":
                break
        p = subprocess.run([ff] + run_cmd(small, w=pickle_like, inp=npy("f1", np.zeros((1, 2, 16), np.float32))),
                           capture_output=True, text=True)
        ok = p.returncode == 0 and open(pickle_like, "rb").read(2) == b"\x80\x05"
        failures += not ok
        print("%-26s %s" % ("header length 80 05 ...", "ok" if ok else "FAIL: " + p.stderr))
        # `fixformer cache` names the cc engine's folder; --clean empties it
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))
        p1 = subprocess.run([ff] + run_cmd(good, "--engine", "cc"), capture_output=True, text=True, env=env)
        p2 = subprocess.run([ff, "cache"], capture_output=True, text=True, env=env)
        cache = os.path.join(tmp, "xdg", "fixformer")
        before = len(os.listdir(cache)) if os.path.isdir(cache) else 0
        p3 = subprocess.run([ff, "cache", "--clean"], capture_output=True, text=True, env=env)
        ok = (p1.returncode == 0 and p2.stdout.strip() == cache and before > 0 and p3.returncode == 0 and
              "removed %d files" % before in p3.stdout and os.listdir(cache) == [])
        failures += not ok
        print("%-26s %s" % ("cache, cache --clean", "ok" if ok else "FAIL: %s %s %s %d" % (p1.stderr, p2.stdout,
                                                                                           p3.stdout, before)))
        # rough edges a new user met (issue 11): a blank line of --lines gives a blank line;
        # bench --generate names its source length; Cortex-M triples are targets
        with open(lines, "w") as f:
            f.write("march 5, 1999\n\n5.3.1999\n")
        p = subprocess.run([ff, "generate", dates, "--lines", lines], capture_output=True, text=True)
        ok = p.returncode == 0 and p.stdout == "1999-03-05\n\n1999-03-05\n"
        failures += not ok
        print("%-26s %s" % ("--lines, a blank line", "ok" if ok else "FAIL: %r %s" % (p.stdout, p.stderr)))
        p = subprocess.run([ff, "bench", dates, "--generate", "2", "--iters", "1", "--engine", "runtime", "--seq", "7"],
                           capture_output=True, text=True)
        ok = p.returncode == 0 and "(source of 7 tokens)" in p.stdout
        failures += not ok
        print("%-26s %s" % ("bench --generate source", "ok" if ok else "FAIL: " + p.stdout + p.stderr))
        # info --weights on a good checkpoint: a table row per tensor with its dtype, exit 0
        w16 = os.path.join(tmp, "w16.safetensors")
        write_safetensors(w16, read_safetensors(weights), dtype="BF16")
        for w, dtype in ((weights, "F32"), (w16, "BF16")):
            p = subprocess.run([ff, "info", good, "--weights", w], capture_output=True, text=True)
            rows = [ln.split() for ln in p.stdout.splitlines() if ln.startswith("  ") and "[" in ln]
            ok = (p.returncode == 0 and p.stderr == "" and len(rows) == 13 and
                  all(r[2] == dtype and r[3] == "ok" for r in rows) and "-- ok: 13 tensors" in p.stdout)
            failures += not ok
            print("%-26s %s" % ("info --weights " + dtype, "ok" if ok else "FAIL: %r %s" % (p.stdout, p.stderr)))
        # the table also shows every problem, not only the first
        p = subprocess.run([ff, "info", good, "--weights", extra_weights], capture_output=True, text=True)
        ok = p.returncode == 1 and re.search(r"head.weight +\[10,16\] +F32 +unexpected", p.stdout) is not None
        failures += not ok
        print("%-26s %s" % ("info --weights table", "ok" if ok else "FAIL: %r" % p.stdout))
        # bench prints each phase as its own line, in order, before the summary and `median_ms`
        p = subprocess.run([ff, "bench", good, "--seq", "4", "--iters", "2", "--engine", "tcc"],
                           capture_output=True, text=True)
        want = ["bench m: encoder", "load weights (random", "generate C: ", "pack weights: ", "compile (tcc) and bind: ",
                "warm-up: 2 runs", "run 1/2: ", "run 2/2: ", "forward batch 1 x T 4", "median_ms: "]
        got = p.stdout.splitlines()
        ok = p.returncode == 0 and len(got) == len(want) and all(g.startswith(w) for g, w in zip(got, want))
        failures += not ok
        print("%-26s %s" % ("bench phase lines", "ok" if ok else "FAIL: %r %s" % (p.stdout, p.stderr)))
        # the slow steps are shown on a terminal (stderr a pty), one finished line each, and nothing on a pipe
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg-tty"))
        status, _, steps = on_terminal([ff] + run_cmd(good, "--engine", "cc"), env)  # a finished line a step
        piped = subprocess.run([ff] + run_cmd(good, "--engine", "cc"), capture_output=True, text=True, env=env)
        want = ["m: read weights: ", "m: generate C: ", "m: pack weights: ", "m: compile with cc: "]
        ok = (status == 0 and len(steps) == len(want) and all(s.startswith(w) and s.endswith(" s\x1b[K")
                                                               for s, w in zip(steps, want)) and
              piped.returncode == 0 and piped.stderr == "")
        failures += not ok
        print("%-26s %s" % ("cc compile, on a terminal", "ok" if ok else "FAIL: %r %r" % (steps, piped.stderr)))
        for triple, isa in (("thumbv7em-none-eabihf", "generic"), ("thumbv6m-none-eabi", "generic"),
                            ("arm-none-eabi", "generic"), ("aarch64-linux-gnu", "neon"), ("i686-linux-gnu", "generic")):
            p = subprocess.run([ff, "emit", good, "-o", os.path.join(tmp, triple), "--target", triple],
                               capture_output=True, text=True)
            src = os.path.join(tmp, triple, "m.c")
            ok = p.returncode == 0 and os.path.exists(src) and ("ff_linear_" + isa) in open(src).read()
            failures += not ok
            print("%-26s %s" % ("--target " + triple, "ok (%s)" % isa if ok else "FAIL: " + p.stderr))
        # a path that would close the header comment and inject code reaches the C text defused
        odd = os.path.join(tmp, "x*/ int evil = 1; /*")
        os.makedirs(odd)
        with open(os.path.join(odd, "m.lua"), "w") as f:
            f.write(GOOD)
        emitted = os.path.join(tmp, "emitted")
        p = subprocess.run([ff, "emit", os.path.join(odd, "m.lua"), "-o", emitted], capture_output=True, text=True)
        c = subprocess.run(["cc", "-std=c99", "-Wall", "-Werror", "-c", os.path.join(emitted, "m.c"), "-o",
                            os.path.join(emitted, "m.o")], capture_output=True, text=True) if p.returncode == 0 else p
        nm = subprocess.run(["nm", os.path.join(emitted, "m.o")], capture_output=True, text=True).stdout \
            if c.returncode == 0 else "evil"
        ok = p.returncode == 0 and c.returncode == 0 and "evil" not in nm
        failures += not ok
        print("%-26s %s" % ("path injection", "ok" if ok else "FAIL: %s%s" % (p.stderr, c.stderr)))
        for cmd in (["--help"], ["info", "--help"], ["init", "--help"], ["run", "--help"], ["emit", "--help"],
                    ["generate", "--help"], ["bench", "--help"], ["cache", "--help"]):
            p = subprocess.run([ff] + cmd, capture_output=True, text=True)
            ok = p.returncode == 0 and "usage" in p.stdout
            failures += not ok
            print("%-26s %s" % ("fixformer " + " ".join(cmd), "ok" if ok else "FAIL"))
    print("%s" % ("all bad inputs rejected cleanly" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
