#!/usr/bin/python3
"""`fixformer import` hardening (issue 22): each case a fault that once got through.

  bf16_f16_folders        a LLaMA folder stored in BF16 (as most are published) and in F16, one file
                          and sharded, and a GPT-2 in BF16 beside a BOOL buffer: imported, and run
                          within 1e-4 of PyTorch on the weights as stored (BF16 once read as an
                          integer dtype: every tensor dropped, "missing tensor")
  refused_descriptions    config values the description schema refuses (rms_norm_eps 2,
                          rope_theta 0.5, layer_norm_epsilon 1.5): one line naming the key, nothing
                          written (import wrote descriptions every other command refused)
  keyword_names           for every C keyword of gen/validate.lua: a folder of that name imports
                          under a name `info` loads, and --name KEYWORD is refused (the folder
                          _Bool gave a description no command loaded)
  sharded_bool_buffers    a sharded GPT-2 whose index lists its BOOL attn.bias buffers imports and
                          runs as the one-file folder does; a tensor the index puts in the wrong
                          shard is still an error
  unusable_tokenizer      a LLaMA-3 style tokenizer.json (Split pre-tokenizer): left out with a
                          note, the model imports and generate --tokens runs; given with
                          --tokenizer it is refused; a description naming a broken tokenizer still
                          runs generate --tokens and run --tokens (ids printed), not --text; a
                          usable --tokenizer for a folder is copied (the folder was taken for a .bin)
  no_overwrite_of_inputs  import . -o ., import onto a hard link of its checkpoint, import
                          --tokenizer onto its own copy, init -o onto the description, run --output
                          onto --input, generate --logits onto the weights, emit -o where
                          NAME.weights is --weights: each one line, every file as it was
  max_seq_flag            import --max-seq N: a llama2.c .bin and a LLaMA config capped, GPT-2's
                          learned table cut to N rows and run against PyTorch; 0, negative, text and
                          above the source's value refused in one line

  hardening_import.py --fixformer BIN [--case NAME]
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
import hf_reference as ref  # noqa: E402
import import_checkpoints as ic  # noqa: E402  (checkpoint writers as publishers lay them out)
from reference import rounded  # noqa: E402

TOL = 1e-4


class Case:
    def __init__(self, ff, tmp):
        self.ff, self.tmp, self.failures = ff, tmp, 0
        self.env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))

    def fail(self, msg):
        print("FAIL " + msg)
        self.failures += 1

    def check(self, ok, msg):
        if not ok:
            self.fail(msg)
        return ok

    def ff_run(self, *args, cwd=None):
        return subprocess.run([self.ff] + [str(a) for a in args], capture_output=True, text=True, errors="replace",
                              env=self.env, cwd=cwd)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)

    def must_fail(self, what, args, piece, cwd=None, status=1):
        """exit status (1: bad input, 2: a flag out of range) and one stderr line holding piece"""
        p = self.ff_run(*args, cwd=cwd)
        lines = p.stderr.strip().splitlines()
        if p.returncode != status or len(lines) != 1 or piece not in lines[0]:
            self.fail("%s: exit %d, stderr %r; wanted one line containing %r" % (what, p.returncode, p.stderr, piece))
            return False
        print("%-34s %s" % (what, lines[0]))
        return True

    def do_import(self, what, src, out, *extra):
        p = self.ff_run("import", src, "-o", out, *extra)
        if p.returncode != 0:
            self.fail("%s: import exited %d: %s" % (what, p.returncode, p.stderr.strip()))
            return None, p
        return p.stdout.strip().splitlines()[-1], p

    def forward_matches(self, what, lua, fw, V, T=9, lengths=(9, 5)):
        """run (runtime) within TOL of fw(ids, lengths) over the valid rows"""
        ids = np.random.default_rng(7).integers(0, V, size=(len(lengths), T)).astype(np.int32)
        for b, n in enumerate(lengths):
            ids[b, n:] = 0
        want = fw(ids, np.array(lengths))
        inp, lens, out = self.path("in.npy"), self.path("len.npy"), self.path("out.npy")
        np.save(inp, ids)
        np.save(lens, np.array(lengths, np.int32))
        p = self.ff_run("run", lua, "--input", inp, "--lengths", lens, "--output", out)
        if not self.check(p.returncode == 0, "%s: run exited %d: %s" % (what, p.returncode, p.stderr.strip())):
            return False
        got = np.load(out)
        err = max(np.abs(got[b, :n] - want[b, :n]).max() for b, n in enumerate(lengths))
        err /= max(max(np.abs(want[b, :n]).max() for b, n in enumerate(lengths)), 1e-30)
        print("%-34s scaled error %.2e against PyTorch" % (what, err))
        return self.check(err <= TOL, "%s: scaled error %.3e above %g" % (what, err, TOL))


def snapshot(folder):
    """name -> (sha256, mtime_ns) of every file under folder: what a refused command must leave as it was"""
    out = {}
    for root, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(root, f)
            st = os.lstat(p)
            data = open(p, "rb").read() if os.path.isfile(p) else b""
            out[os.path.relpath(p, folder)] = (hashlib.sha256(data).hexdigest(), st.st_mtime_ns, st.st_ino)
    return out


def bf16_f16_folders(c):
    cfg, sd = ic.llama_case(seed=41, d=48, H=4, KV=2, ff=96, L=2, V=70, P=32)
    for dtype, shards in (("BF16", 1), ("BF16", 2), ("F16", 1)):
        what = "llama %s %d file%s" % (dtype, shards, "s" if shards > 1 else "")
        src = c.path("llama_%s_%d" % (dtype, shards))
        ic.write_hf(src, cfg, sd, shards, dtype)
        lua, _ = c.do_import(what, src, c.path("out_" + os.path.basename(src)))
        stored = rounded(sd, dtype)
        if lua:
            c.forward_matches(what, lua, lambda ids, lens: ref.llama_forward(cfg, stored, ids, lens), cfg["vocab_size"])
    # GPT-2 in BF16 with its causal-mask buffers as BOOL: the buffers set aside, the BF16 weights kept
    cfg, sd = ic.gpt2_case(seed=42, d=32, H=2, L=2, V=60, P=16)
    masks = {k: sd.pop(k) for k in [k for k in sd if k.endswith(".attn.bias")]}
    src = c.path("gpt2_bf16")
    ic.write_hf(src, cfg, sd, 1, "BF16")
    for k, v in masks.items():
        ic.add_integer_tensor(os.path.join(src, "model.safetensors"), k, v.astype(bool), "BOOL")
    lua, p = c.do_import("gpt2 BF16 + BOOL buffers", src, c.path("out_gpt2_bf16"))
    if lua:
        c.check("ignored 2 tensors: causal-mask buffers" in p.stdout, "gpt2 BF16: the BOOL buffers not reported ignored")
        stored = rounded(sd, "BF16")
        c.forward_matches("gpt2 BF16 + BOOL buffers", lua, lambda ids, lens: ref.gpt2_forward(cfg, stored, ids, lens),
                          cfg["vocab_size"])


def refused_descriptions(c):
    lcfg, lsd = ic.llama_case(seed=43, d=16, H=2, KV=2, ff=32, L=1, V=12, P=8)
    gcfg, gsd = ic.gpt2_case(seed=44, d=16, H=2, L=1, V=12, P=8)
    cases = [("rms_norm_eps 2", dict(lcfg, rms_norm_eps=2.0), lsd, "eps: 2 is above the limit 1"),
             ("rope_theta 0.5", dict(lcfg, rope_theta=0.5), lsd, "rope_theta: must be > 1, got 0.5"),
             ("layer_norm_epsilon 1.5", dict(gcfg, layer_norm_epsilon=1.5), gsd, "eps: 1.5 is above the limit 1")]
    keep = c.path("keep")
    os.makedirs(keep)
    open(os.path.join(keep, "earlier.lua"), "w").write("-- an earlier import\n")
    before = snapshot(keep)
    for what, cfg, sd, piece in cases:
        src = c.path("bad_" + what.split()[0])
        ic.write_hf(src, cfg, sd)
        out = c.path("refused_out")
        if c.must_fail(what, ["import", src, "-o", out], piece):
            c.check(not os.path.exists(out), "%s: %s was created" % (what, out))
            c.check("config.json gives a description fixformer refuses" in c.ff_run("import", src, "-o", out).stderr,
                    "%s: the message does not name config.json" % what)
        c.must_fail(what + " (into a folder)", ["import", src, "-o", keep, "--name", "earlier"], piece)
        c.check(snapshot(keep) == before, "%s: a refused import changed %s" % (what, keep))


def c_keywords():
    """validate.lua's C_KEYWORDS: the list import's names must stay out of"""
    text = open(os.path.join(HERE, "..", "gen", "validate.lua")).read()
    block = re.search(r'local C_KEYWORDS = \{\}\nfor w in \(\[\[(.*?)\]\]\)', text, re.S).group(1)
    return block.split()


def keyword_names(c):
    cfg, sd = ic.llama_case(seed=45, d=16, H=2, KV=2, ff=32, L=1, V=12, P=8)
    model = c.path("kw_model")
    ic.write_hf(model, cfg, sd)
    words = c_keywords()
    c.check("_Bool" in words and "switch" in words and len(words) >= 37, "validate.lua's keyword list not found")
    for w in words + ["_Private", "__x", "9lives"]:  # and C's reserved _X and __ prefixes, a digit first
        folder = c.path("kw", w)
        os.makedirs(os.path.dirname(folder), exist_ok=True)
        os.symlink(model, folder)
        out = c.path("kw_out_" + w)
        lua, _ = c.do_import("folder " + w, folder, out)
        if not lua:
            continue
        name = os.path.basename(lua)[:-4]
        p = c.ff_run("info", lua)
        ok = c.check(p.returncode == 0, "folder %s: info refuses the imported %s: %s" % (w, lua, p.stderr.strip()))
        ok = c.check(name != w and not re.match(r"_[A-Z_]", name), "folder %s: named %s" % (w, name)) and ok
        if w in words:
            ok = c.must_fail("--name " + w, ["import", model, "-o", c.path("kw_named"), "--name", w],
                             "--name: '%s' is a C keyword" % w) and ok
            c.check(not os.path.exists(c.path("kw_named")), "--name %s: a folder was written" % w)
        if ok:
            print("%-34s imported as %s" % ("folder " + w, name))


def sharded_bool_buffers(c):
    cfg, sd = ic.gpt2_case(seed=46, d=32, H=2, L=3, V=50, P=16)
    masks = {k: sd.pop(k) for k in [k for k in sd if k.endswith(".attn.bias")]}
    src = c.path("gpt2_sharded_bool")
    ic.write_hf(src, cfg, sd, 2)
    index = os.path.join(src, "model.safetensors.index.json")
    j = json.load(open(index))
    for i, (k, v) in enumerate(sorted(masks.items())):  # as transformers saves them: in the shards, in the index
        shard = "model-%05d-of-00002.safetensors" % (i % 2 + 1)
        ic.add_integer_tensor(os.path.join(src, shard), k, v.astype(bool), "BOOL")
        j["weight_map"][k] = shard
    json.dump(j, open(index, "w"))
    lua, p = c.do_import("sharded GPT-2 + BOOL buffers", src, c.path("out_sharded_bool"))
    if lua:
        c.check("ignored 3 tensors: causal-mask buffers" in p.stdout, "sharded GPT-2: buffers not reported ignored")
        c.forward_matches("sharded GPT-2 + BOOL buffers", lua, lambda ids, lens: ref.gpt2_forward(cfg, sd, ids, lens),
                          cfg["vocab_size"])
    first = sorted(masks)[0]
    j["weight_map"][first] = "model-00002-of-00002.safetensors"  # it is in shard 1
    json.dump(j, open(index, "w"))
    c.must_fail("buffer listed in the wrong shard", ["import", src, "-o", c.path("out_wrong_shard")],
                "tensor '%s' is not in its shard model-00002-of-00002.safetensors" % first)


def llama3_tokenizer(V):
    """A LLaMA-3 style tokenizer.json whose Split pattern fixformer does not follow (LLaMA-3's, cut short)"""
    j = ic.byte_level_tokenizer()
    j["model"]["vocab"] = {k: v for k, v in j["model"]["vocab"].items() if v < V}
    j["added_tokens"] = []
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    return j


def unusable_tokenizer(c):
    cfg, sd = ic.llama_case(seed=47, d=32, H=4, KV=2, ff=64, L=2, V=256, P=32)
    src = c.path("llama3_tok")
    ic.write_hf(src, cfg, sd)
    json.dump(llama3_tokenizer(256), open(os.path.join(src, "tokenizer.json"), "w"))
    out = c.path("out_llama3_tok")
    lua, p = c.do_import("Split pre-tokenizer beside", src, out, "--name", "l3")
    if not lua:
        return
    text = open(lua).read()
    c.check("tokenizer left out" in p.stdout and "pre_tokenizer Split's pattern" in p.stdout,
            "the summary does not say the tokenizer was left out: %r" % p.stdout)
    c.check("vocabulary" not in text and sorted(os.listdir(out)) == ["l3.lua", "l3.safetensors"],
            "the unusable tokenizer was copied or named: %s" % sorted(os.listdir(out)))
    prompt = [5, 17, 42, 9]
    want = ref.greedy(lambda ids, lens: ref.llama_forward(cfg, sd, ids, lens), prompt, 5)
    g = c.ff_run("generate", lua, "--tokens", " ".join(map(str, prompt)), "--max-new", 5, "--engine", "runtime")
    if c.check(g.returncode == 0 and g.stdout.split() == [str(i) for i in want],
               "generate --tokens on the import: %r %r, reference %s" % (g.stdout, g.stderr, want)):
        print("%-34s imported without it; generate --tokens: %s" % ("Split pre-tokenizer beside", g.stdout.strip()))
    c.must_fail("Split pre-tokenizer --tokenizer", ["import", src, "-o", c.path("out_given"), "--tokenizer",
                                                   os.path.join(src, "tokenizer.json")],
                "--tokenizer: %s: pre_tokenizer Split's pattern" % os.path.join(src, "tokenizer.json"))
    c.check(not os.path.exists(c.path("out_given")), "--tokenizer refused, but the folder was written")
    # a tokenizer with ids past the model's vocab: left out as well
    json.dump(ic.byte_level_tokenizer(), open(os.path.join(src, "tokenizer.json"), "w"))
    lua2, p = c.do_import("tokenizer past the vocab", src, c.path("out_past"), "--name", "past")
    c.check(lua2 is not None and "tokenizer left out" in p.stdout and "token id 256" in p.stdout,
            "a tokenizer with ids past the vocab was not left out: %r" % p.stdout)
    # a description naming a tokenizer generate cannot load: ids in, ids out
    open(os.path.join(out, "broken.json"), "w").write(json.dumps(llama3_tokenizer(256)))
    open(lua, "w").write(text.replace("  max_seq =", '  vocabulary = "broken.json",\n  max_seq ='))
    g = c.ff_run("generate", lua, "--tokens", " ".join(map(str, prompt)), "--max-new", 5, "--engine", "runtime")
    if c.check(g.returncode == 0 and g.stdout.split() == [str(i) for i in want] and "broken.json" in g.stderr
               and "printing ids" in g.stderr,
               "generate --tokens with a broken tokenizer: exit %d %r %r" % (g.returncode, g.stdout, g.stderr)):
        print("%-34s generate --tokens prints ids: %s" % ("broken vocabulary", g.stderr.strip()))
    r = c.ff_run("run", lua, "--tokens", "5 17 42")
    c.check(r.returncode == 0 and r.stdout.startswith("sequence 0:"),
            "run --tokens with a broken tokenizer: exit %d %r" % (r.returncode, r.stderr))
    c.must_fail("broken vocabulary, --text", ["generate", lua, "--text", "hi", "--engine", "runtime"],
                "pre_tokenizer Split's pattern")
    # a usable tokenizer given with --tokenizer for a folder: copied (the folder once taken for a .bin)
    given = c.path("given.json")
    json.dump(ic.byte_level_tokenizer(), open(given, "w"))
    cfg, sd = ic.gpt2_case(seed=52, d=16, H=2, L=1, V=257, P=8)
    src = c.path("gpt2_given")
    ic.write_hf(src, cfg, sd)
    lua, _ = c.do_import("usable --tokenizer for a folder", src, c.path("out_gpt2_given"), "--tokenizer", given)
    if lua and c.check(open(os.path.join(c.path("out_gpt2_given"), "gpt2_given.tokenizer.json")).read() ==
                       open(given).read(), "--tokenizer for a folder: not copied"):
        print("%-34s copied" % "usable --tokenizer for a folder")


def no_overwrite_of_inputs(c):
    cfg, sd = ic.gpt2_case(seed=48, d=16, H=2, L=1, V=257, P=8)  # the byte-level tokenizer's 257 ids
    folder = c.path("ckpt")
    ic.write_hf(folder, cfg, sd)
    json.dump(ic.byte_level_tokenizer(), open(os.path.join(folder, "tokenizer.json"), "w"))

    def refused(what, args, files, cwd=None, piece="refusing to write over"):
        before = snapshot(files)
        c.must_fail(what, args, piece, cwd=cwd)
        after = snapshot(files)
        c.check(after == before, "%s: files changed: %s" % (what, sorted(set(after.items()) ^ set(before.items()))))

    def copy(name):  # a checkpoint of its own for each case: one the old code destroyed spoils no other
        shutil.copytree(folder, c.path(name), symlinks=True)
        return c.path(name)

    # import . -o .: model.safetensors is the checkpoint's own (the default name from "." is model)
    here = copy("here")
    refused("import . -o .", ["import", ".", "-o", "."], here, cwd=here)
    here = copy("here_named")
    refused("import . -o . --name model", ["import", ".", "-o", ".", "--name", "model"], here, cwd=here)
    # a hard link to the checkpoint under the name import writes
    linked = copy("linked")
    out = c.path("linked_out")
    os.makedirs(out)
    os.link(os.path.join(linked, "model.safetensors"), os.path.join(out, "m.safetensors"))
    refused("import onto a hard link", ["import", linked, "-o", out, "--name", "m"], c.tmp)
    # the commands on an imported model: each case in a copy of its own (g.lua, g.safetensors, g.tokenizer.json)
    first = c.path("first")
    lua, _ = c.do_import("first import", folder, first, "--name", "g")
    if not lua:
        return
    np.save(os.path.join(first, "in.npy"), np.array([[1, 2, 3]], np.int32))

    def model(name):
        d = c.path(name)
        shutil.copytree(first, d)
        return d, os.path.join(d, "g.lua"), os.path.join(d, "g.safetensors")

    d, lua, _ = model("m_tok")
    refused("import --tokenizer onto its copy",
            ["import", folder, "-o", d, "--name", "g", "--tokenizer", os.path.join(d, "g.tokenizer.json")], d)
    d, lua, _ = model("m_init")
    refused("init -o onto the description", ["init", lua, "-o", lua], d)
    d, lua, _ = model("m_run_in")
    refused("run --output onto --input", ["run", lua, "--input", os.path.join(d, "in.npy"), "--output",
                                          os.path.join(d, "in.npy")], d)
    d, lua, _ = model("m_run_w")
    refused("run --output onto the weights", ["run", lua, "--input", os.path.join(d, "in.npy"), "--output",
                                              os.path.join(d, ".", "g.safetensors")], d)
    d, lua, weights = model("m_gen_w")
    refused("generate --logits onto the weights",
            ["generate", lua, "--tokens", "1 2", "--max-new", 2, "--engine", "runtime", "--logits", weights], d)
    d, lua, _ = model("m_gen_v")
    refused("generate --logits onto the vocabulary",
            ["generate", lua, "--tokens", "1 2", "--max-new", 2, "--engine", "runtime", "--logits",
             os.path.join(d, "g.tokenizer.json")], d)
    d, lua, weights = model("m_emit_w")
    os.rename(weights, os.path.join(d, "g.weights"))  # the safetensors under the name emit writes
    refused("emit --weights onto NAME.weights", ["emit", lua, "-o", d, "--weights", os.path.join(d, "g.weights")], d)
    d, lua, _ = model("m_emit_d")
    os.rename(lua, os.path.join(d, "g.c"))  # the description under the name emit writes
    refused("emit onto the description", ["emit", os.path.join(d, "g.c"), "-o", d], d)
    # what is not an input is still written, and import runs again into its own folder
    d, lua, _ = model("m_ok")
    p = c.ff_run("run", lua, "--input", os.path.join(d, "in.npy"), "--output", os.path.join(d, "out.npy"))
    c.check(p.returncode == 0 and os.path.isfile(os.path.join(d, "out.npy")), "run --output elsewhere: %s" % p.stderr)
    lua2, _ = c.do_import("import again into the same folder", folder, d, "--name", "g")
    c.check(lua2 == lua, "re-import into the same folder failed")


def max_seq_flag(c):
    # llama2.c .bin with a long seq_len
    p, w = ic.llama2c_case(seed=49, dim=32, hidden=64, L=2, H=4, KV=2, V=40, seq=4096, shared=False)
    binp = c.path("long.bin")
    ic.write_llama2c(binp, p, w, 1)
    lua, out = c.do_import("llama2.c --max-seq 64", binp, c.path("out_l2c"), "--max-seq", 64)
    if lua:
        c.check("max_seq = 64," in open(lua).read() and "max_seq 64 of its seq_len = 4096 (--max-seq)" in out.stdout,
                "llama2.c --max-seq 64: not in the description or the summary: %r" % out.stdout)
        c.forward_matches("llama2.c --max-seq 64", lua, lambda ids, lens: ref.llama2c_forward(p, w, ids, lens), 40)
    # a LLaMA config.json claiming 131072 positions
    cfg, sd = ic.llama_case(seed=50, d=32, H=4, KV=4, ff=64, L=1, V=30, P=131072)
    src = c.path("llama_long")
    ic.write_hf(src, cfg, sd)
    lua, _ = c.do_import("llama --max-seq 32", src, c.path("out_llama_long"), "--max-seq", 32)
    if lua:
        c.check("max_seq = 32," in open(lua).read(), "llama --max-seq 32: not in the description")
        c.forward_matches("llama --max-seq 32", lua, lambda ids, lens: ref.llama_forward(cfg, sd, ids, lens), 30)
        c.must_fail("generate past --max-seq", ["generate", lua, "--tokens", " ".join(["1"] * 30), "--max-new", 3,
                                                "--engine", "runtime"], "max_seq = 32")
    # GPT-2's learned positions: the first N rows of wpe
    cfg, sd = ic.gpt2_case(seed=51, d=32, H=2, L=2, V=40, P=64)
    src = c.path("gpt2_long")
    ic.write_hf(src, cfg, sd)
    lua, out = c.do_import("gpt2 --max-seq 16", src, c.path("out_gpt2_long"), "--max-seq", 16)
    if lua:
        raw = open(os.path.join(c.path("out_gpt2_long"), "gpt2_long.safetensors"), "rb").read()
        header = json.loads(raw[8:8 + struct.unpack("<Q", raw[:8])[0]])
        c.check(header["pos_embed.weight"]["shape"] == [16, 32] and "pos_embed.weight keeps the first rows" in out.stdout,
                "gpt2 --max-seq 16: pos_embed.weight is %s" % header["pos_embed.weight"]["shape"])
        c.forward_matches("gpt2 --max-seq 16", lua, lambda ids, lens: ref.gpt2_forward(cfg, sd, ids, lens), 40)
    for bad, piece, status in (("0", "--max-seq must be at least 1", 2),
                               ("-3", "--max-seq: '-3' is not a non-negative integer", 2),
                               ("many", "--max-seq: 'many' is not a non-negative integer", 2),
                               ("65", "--max-seq 65 is outside 1..64 (%s: n_positions = 64)" %
                                os.path.join(src, "config.json"), 1)):
        if c.must_fail("--max-seq " + bad, ["import", src, "-o", c.path("out_bad_max"), "--max-seq", bad], piece,
                       status=status):
            c.check(not os.path.exists(c.path("out_bad_max")), "--max-seq %s: a folder was written" % bad)
    c.must_fail("--max-seq above seq_len", ["import", binp, "-o", c.path("out_bad_max"), "--max-seq", 4097],
                "--max-seq 4097 is outside 1..4096 (%s: seq_len = 4096)" % binp)


CASES = {f.__name__: f for f in (bf16_f16_folders, refused_descriptions, keyword_names, sharded_bool_buffers,
                                 unusable_tokenizer, no_overwrite_of_inputs, max_seq_flag)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--case", choices=sorted(CASES), action="append")
    args = ap.parse_args()
    failed = []
    for name in args.case or list(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            c = Case(os.path.abspath(args.fixformer), tmp)
            print("== " + name)
            CASES[name](c)
            if c.failures:
                failed.append(name)
    print("failed: " + ", ".join(failed) if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
