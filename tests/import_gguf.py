#!/usr/bin/python3
"""`fixformer import MODEL.gguf` against the models the files hold.

The test writes its GGUF files itself, following the published spec (ggml's
docs/gguf.md: header, metadata key/values of every type, tensor infos with
dims innermost first, general.alignment, the aligned data section), from
random LLaMA and Qwen2 checkpoints in Hugging Face's layout
(tests/import_checkpoints.py), renamed and, for llama, with q/k rows permuted
as llama.cpp's convert_hf_to_gguf.py permutes them.  Cases:

  weights     llama (GQA, untied, version 3) and qwen2 (q/k/v biases, tied,
              version 2, alignment 64) in F32, F16, BF16 and Q8_0 (quantized
              here as ggml's quantize_row_q8_0_ref: d = max|x| / 127 stored as
              f16, q = round(x / d)): `run` on runtime and tcc (Q8_0: also
              cc, and the emitted program within 1e-5 of the runtime)
              within 1e-4 of Hugging Face's formulas (tests/lib/hf_reference.py) on the values
              the file holds (Q8_0: q * d); the Q8_0 import describes dtype
              "int8", writes exactly q * d, and quant.c's int8 formula (scale
              max|w| / 127, q = round(w / scale)) gives back the stored blocks;
              Q8_0 beside an F16 matrix keeps the float values (no dtype)
  tokenizers  the files the test writes as @huggingface/gguf reads them (npm, pinned in
              tests/tokenizers: every key, type and value, the tensor infos); the
              llama file's SentencePiece tokenizer (tokenizer.ggml.model
              "llama": tokens, scores, token_type) against run.c's encode
              ported to Python, and the qwen2 file's byte-level BPE ("gpt2":
              tokens, merges) against @huggingface/tokenizers by node on a
              tokenizer.json the test writes from the same vocabulary
  errors      bad files: one stderr line naming the problem, exit 1, nothing
              written (bad magic, version 1, truncated anywhere, absurd
              counts, an unknown value type, an unsupported tensor type, a
              tensor past the end, a missing key)

  import_gguf.py --fixformer BIN --case weights|tokenizers|errors
  import_gguf.py --write DIR      only write a llama Q8_0 file with its tokenizer (the docs' example)
"""
import argparse
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)
import hf_reference as ref  # noqa: E402
import import_checkpoints as ic  # noqa: E402
import tokenizers as toks  # noqa: E402
from reference import read_safetensors  # noqa: E402

# ---- a GGUF writer from the spec -------------------------------------------------

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
PACK = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?", U64: "<Q",
        I64: "<q", F64: "<d"}
T_F32, T_F16, T_Q8_0, T_BF16 = 0, 1, 8, 30


def gstr(s):
    b = s.encode("utf-8") if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gvalue(vtype, v):
    if vtype == STRING:
        return gstr(v)
    if vtype == ARRAY:
        elem, items = v
        return struct.pack("<IQ", elem, len(items)) + b"".join(gvalue(elem, x) for x in items)
    return struct.pack(PACK[vtype], v)


def bf16_bits(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def q8_0(x):
    """ggml's quantize_row_q8_0_ref along rows: (d as f16 [rows, blocks], q int8 [rows, cols])."""
    rows, cols = x.shape
    b = x.reshape(rows, cols // 32, 32).astype(np.float32)
    d = np.abs(b).max(-1) / np.float32(127)
    inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    v = b * inv[..., None]
    q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)  # roundf: half away from zero
    return d.astype(np.float16), q.reshape(rows, cols)


def stored(x, ttype):
    """the float32 values a tensor of ttype holds"""
    x = np.asarray(x, np.float32)
    if ttype == T_F16:
        return x.astype(np.float16).astype(np.float32)
    if ttype == T_BF16:
        return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32)
    if ttype == T_Q8_0:
        d, q = q8_0(x)
        return (q.reshape(d.shape + (32,)).astype(np.float32) * d.astype(np.float32)[..., None]).reshape(x.shape)
    return x


def tensor_bytes(x, ttype):
    x = np.asarray(x, np.float32)
    if ttype == T_F32:
        return x.astype("<f4").tobytes()
    if ttype == T_F16:
        return x.astype("<f2").tobytes()
    if ttype == T_BF16:
        return bf16_bits(x).astype("<u2").tobytes()
    d, q = q8_0(x)
    blocks = [d.reshape(-1, 1).view(np.uint8).reshape(-1, 2), q.reshape(-1, 32).view(np.uint8)]
    return np.concatenate(blocks, axis=1).tobytes()


def write_gguf(path, kvs, tensors, version=3, alignment=32):
    """kvs: [(key, vtype, value)]; tensors: [(name, ggml type, float32 array [rows, cols] or [n])].
    Returns the layout written: the data's start and each tensor's (name, dims, type, offset)."""
    out = [b"GGUF", struct.pack("<IQQ", version, len(tensors), len(kvs))]
    out += [gstr(k) + struct.pack("<I", t) + gvalue(t, v) for k, t, v in kvs]
    blobs, offset, infos = [], 0, []
    for name, ttype, x in tensors:
        dims = list(reversed(np.shape(x)))  # innermost first
        out.append(gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", n) for n in dims) +
                   struct.pack("<IQ", ttype, offset))
        infos.append((name, dims, ttype, offset))
        blob = tensor_bytes(x, ttype)
        blob += b"\0" * (-len(blob) % alignment)
        blobs.append(blob)
        offset += len(blob)
    head = b"".join(out)
    head += b"\0" * (-len(head) % alignment)
    with open(path, "wb") as f:
        f.write(head + b"".join(blobs))
    return len(head), infos


# ---- HF checkpoints as llama.cpp writes them ----------------------------------------

def permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute of q_proj / k_proj rows (HF's halves to Meta's pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
              "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
              "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
              "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.bias": "attn_k.bias",
              "self_attn.v_proj.bias": "attn_v.bias", "mlp.gate_proj.weight": "ffn_gate.weight",
              "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight"}


def gguf_tensors(cfg, sd, arch, ttype):
    """[(gguf name, type, values)] and the HF state dict of the values the file holds: matrices in ttype,
    vectors F32 (as llama.cpp writes them)."""
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out, held = [], {}
    for k, v in sorted(sd.items()):
        t = ttype if np.ndim(v) == 2 else T_F32
        held[k] = stored(v, t)
        if k == "model.embed_tokens.weight":
            name = "token_embd.weight"
        elif k == "model.norm.weight":
            name = "output_norm.weight"
        elif k == "lm_head.weight":
            name = "output.weight"
        else:
            i, rest = k[len("model.layers."):].split(".", 1)
            name = "blk.%s.%s" % (i, GGUF_NAMES[rest])
        if arch == "llama" and rest_of(k) in ("self_attn.q_proj.weight", "self_attn.k_proj.weight"):
            v = permute(np.asarray(v), H if "q_proj" in k else KV)  # rows: q8_0 blocks stay whole
        out.append((name, t, np.asarray(v, np.float32)))
    return out, held


def rest_of(k):
    return k.split(".", 3)[3] if k.startswith("model.layers.") else k


def metadata(cfg, arch, tokenizer_kvs=()):
    a = arch + "."
    kvs = [("general.architecture", STRING, arch), ("general.name", STRING, "tiny " + arch),
           ("general.file_type", U32, 0), ("general.tags", ARRAY, (STRING, ["a", "b"])),
           ("general.numbers", ARRAY, (ARRAY, [(I16, [1, -2]), (F64, [0.5])])),  # nested: read past
           ("general.flags", ARRAY, (BOOL, [True, False])), ("general.quantized_by", STRING, "the test"),
           (a + "context_length", U32, cfg["max_position_embeddings"]),
           (a + "embedding_length", U32, cfg["hidden_size"]), (a + "block_count", U32, cfg["num_hidden_layers"]),
           (a + "feed_forward_length", U64, cfg["intermediate_size"]),
           (a + "attention.head_count", U32, cfg["num_attention_heads"]),
           (a + "attention.head_count_kv", I32, cfg["num_key_value_heads"]),
           (a + "rope.freq_base", F32, cfg["rope_theta"]),
           (a + "rope.dimension_count", U16, cfg["hidden_size"] // cfg["num_attention_heads"]),
           (a + "attention.layer_norm_rms_epsilon", F32, cfg["rms_norm_eps"]),
           ("general.size", I64, -1), ("general.u8", U8, 7), ("general.i8", I8, -7), ("general.f64", F64, 0.25)]
    return kvs + list(tokenizer_kvs)


# ---- the tokenizers -------------------------------------------------------------------

def sp_tokenizer():
    """A SentencePiece BPE (tests/tokenizers.py's), as GGUF metadata and as run.c's tables."""
    vocab, merges = toks.train_sp(toks.corpus(), 120)
    rank = {a + b: i for i, (a, b) in enumerate(merges)}
    scores = [-float(rank[t]) if t in rank else 0.0 for t in vocab]
    types = [2 if i == 0 else 3 if i < 3 else 6 if i < 259 else 1 for i in range(len(vocab))]
    kvs = [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, (STRING, vocab)),
           ("tokenizer.ggml.scores", ARRAY, (F32, scores)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
           ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
           ("tokenizer.ggml.unknown_token_id", U32, 0), ("tokenizer.ggml.add_bos_token", BOOL, True)]
    runc = [t.replace(toks.SP, " ").encode("utf-8") for t in vocab]
    return kvs, len(vocab), (runc, [float(np.float32(s)) for s in scores])


# Qwen2's pre-tokenizer regex (its tokenizer.json's Split; llama.cpp's "qwen2")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_bpe(n_merges=150):
    """A byte-level BPE trained on the corpus: GPT-2's byte characters, merges by pair count; the
    metadata names Qwen2's pre-tokenizer, and the reference tokenizer.json has its Split."""
    j = ic.byte_level_tokenizer()
    vocab = {t: i for t, i in j["model"]["vocab"].items() if i < 256}
    b2u = {b: t for t, b in vocab.items()}
    words = {}
    for line in toks.corpus():
        for w in line.split(" "):
            w = "".join(b2u[b] for b in (" " + w).encode("utf-8"))
            words[w] = words.get(w, 0) + 1
    seqs, merges = {w: list(w) for w in words}, []
    while len(merges) < n_merges:
        pairs = {}
        for w, n in words.items():
            for p in zip(seqs[w], seqs[w][1:]):
                pairs[p] = pairs.get(p, 0) + n
        if not pairs:
            break
        a, b = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(a + " " + b)
        vocab.setdefault(a + b, len(vocab))
        seqs = {w: toks.merge_pair(sq, a, b) for w, sq in seqs.items()}
    vocab["<|endoftext|>"] = len(vocab)
    tokens = sorted(vocab, key=vocab.get)
    types = [3 if t == "<|endoftext|>" else 1 for t in tokens]
    kvs = [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "qwen2"),
           ("tokenizer.ggml.tokens", ARRAY, (STRING, tokens)), ("tokenizer.ggml.token_type", ARRAY, (I32, types)),
           ("tokenizer.ggml.merges", ARRAY, (STRING, merges)),
           ("tokenizer.ggml.eos_token_id", U32, vocab["<|endoftext|>"])]
    j["model"]["vocab"], j["model"]["merges"] = vocab, merges
    j["added_tokens"][0]["id"] = vocab["<|endoftext|>"]
    j["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]}
    return kvs, len(vocab), j


# ---- cases --------------------------------------------------------------------------

TYPES = [("f32", T_F32), ("f16", T_F16), ("bf16", T_BF16), ("q8_0", T_Q8_0)]


def llama_model():
    """(arch, cfg, sd, tokenizer kvs, version, alignment) of the llama file"""
    sp_kvs, sp_v, _ = sp_tokenizer()
    cfg, sd = ic.llama_case(seed=31, d=64, H=4, KV=2, ff=96, L=2, V=sp_v, P=512)
    return ("llama", cfg, sd, sp_kvs, 3, 32)


def models():
    """the llama and the qwen2 file's (arch, cfg, sd, tokenizer kvs, version, alignment)"""
    bpe_kvs, bpe_v, _ = byte_bpe()
    cfg, sd = ic.qwen2_case(seed=32, d=64, H=4, KV=2, ff=64, L=2, V=bpe_v, P=512, tied=True)
    return [llama_model(), ("qwen2", cfg, sd, bpe_kvs, 2, 64)]


def write_model(c, arch, cfg, sd, tok_kvs, version, alignment, tname, ttype, stem=None):
    tensors, held = gguf_tensors(cfg, sd, arch, ttype)
    kvs = metadata(cfg, arch, tok_kvs)
    if alignment != 32:
        kvs.append(("general.alignment", U32, alignment))
    path = os.path.join(c.tmp, "%s_%s.gguf" % (stem or arch, tname))
    layout = write_gguf(path, kvs, tensors, version, alignment)
    c.written = (kvs, version, layout)  # for cross_check
    return path, held


def check_q8(c, name, lua, sd):
    """dtype int8, the values q * d exactly, and quant.c's int8 formula gives back d and q."""
    text = open(lua).read()
    if 'dtype = "int8"' not in text:
        return c.fail("%s: the description does not say dtype int8" % name)
    w = read_safetensors(lua[:-4] + ".safetensors")
    x = sd["model.layers.0.mlp.gate_proj.weight"]
    got = w["layers.0.gate_proj.weight"]
    d, q = q8_0(x)
    want = stored(x, T_Q8_0)
    if not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
        return c.fail("%s: gate_proj's values are not q * d" % name)
    g = got.reshape(got.shape[0], -1, 32)
    scale = np.abs(g).max(-1) / np.float32(127)  # runtime/quant.c's ff_q8_group
    q2 = np.sign(g / scale[..., None]) * np.floor(np.abs(g / scale[..., None]) + 0.5)
    if not (np.array_equal(scale, np.abs(d.astype(np.float32))) and np.array_equal(q2.astype(np.int8).reshape(q.shape), q)):
        return c.fail("%s: int8's quantization does not give back the Q8_0 blocks" % name)
    print("%-28s dtype int8: %d blocks of gate_proj as stored (scale and q equal)" % (name, d.size))


def case_weights(c):
    for arch, cfg, sd, tok_kvs, version, alignment in models():
        for tname, ttype in TYPES:
            name = "%s_%s" % (arch, tname)
            path, held = write_model(c, arch, cfg, sd, tok_kvs, version, alignment, tname, ttype)
            lua = c.do_import(name, path)
            if not lua:
                continue
            fw = lambda ids, lens, cfg=cfg, held=held: ref.llama_forward(cfg, held, ids, lens)  # noqa: E731
            c.forward(name, lua, fw, cfg["vocab_size"], 8, [8, 5])
            if ttype == T_Q8_0:
                check_q8(c, name, lua, sd)
                check_cc_emitted(c, name, lua, fw, cfg["vocab_size"])
    case_mixed(c)


def check_cc_emitted(c, name, lua, fw, V):
    """The Q8_0 model (dtype int8) on the cc engine against the same reference, and as emitted C (gcc -O2
    -Werror, packed weights): the program's logits within 1e-5 of the runtime's on the same ids"""
    engines, c.engines = c.engines, ["cc"]
    c.forward(name, lua, fw, V, 8, [8, 5])  # writes in.npy / len.npy, and out_cc.npy
    c.engines = engines
    out, model = os.path.join(c.tmp, name + "_emit"), os.path.basename(lua)[:-4]
    exe, got, ref_out = os.path.join(out, model), os.path.join(c.tmp, name + "_emit.npy"), os.path.join(c.tmp, "rt.npy")
    inp, lens = os.path.join(c.tmp, "in.npy"), os.path.join(c.tmp, "len.npy")
    for cmd in ([c.ff, "run", lua, "--input", inp, "--lengths", lens, "--output", ref_out, "--engine", "runtime"],
                [c.ff, "emit", lua, "-o", out, "--with-main"],
                ["gcc", "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe, exe + ".c", exe + "_main.c",
                 exe + "_kernels.c", "-lm"],
                [exe, "--weights", exe + ".weights", "--input", inp, "--lengths", lens, "--output", got]):
        p = ic.run(cmd)
        if p.returncode:
            return c.fail("%s emitted: %s exited %d: %s" % (name, os.path.basename(cmd[0]), p.returncode,
                                                            p.stderr.strip()[-300:]))
    a, b = np.load(got), np.load(ref_out)
    err = float(np.abs(a - b).max() / np.abs(b).max()) if a.shape == b.shape else float("inf")
    print("%-28s %-8s scaled error %.2e against the runtime" % (name, "emitted", err))
    if not err <= 1e-5:
        c.fail("%s emitted: scaled error %.3e" % (name, err))


def case_mixed(c):
    """Q8_0 beside an F16 matrix (ffn_down): int8 would quantize the F16 one, so the float values stay (f32)."""
    arch, cfg, sd, tok_kvs, version, alignment = llama_model()
    tensors, held = gguf_tensors(cfg, sd, arch, T_Q8_0)
    for i, (n, t, x) in enumerate(tensors):
        if n.endswith("ffn_down.weight"):
            tensors[i] = (n, T_F16, x)
            held["model.layers.%s.mlp.down_proj.weight" % n.split(".")[1]] = stored(x, T_F16)
    path = os.path.join(c.tmp, "mixed.gguf")
    write_gguf(path, metadata(cfg, arch, tok_kvs), tensors)
    lua = c.do_import("mixed", path)
    if not lua:
        return
    if "dtype" in open(lua).read():
        return c.fail("mixed: the description sets a dtype")
    fw = lambda ids, lens: ref.llama_forward(cfg, held, ids, lens)  # noqa: E731
    c.forward("llama_q8_0_f16_mixed", lua, fw, cfg["vocab_size"], 8, [8, 5])


def tokenize(c, lua, lines_path):
    p = ic.run([c.ff, "tokenize", lua, "--lines", lines_path, "--no-special"])
    if p.returncode:
        c.fail("tokenize %s: %s" % (lua, p.stderr.strip()))
        return None
    return [[int(x) for x in l.split()] for l in p.stdout.splitlines()]


def same_value(vtype, got, want):
    if vtype == ARRAY:
        elem, items = want
        return len(got) == len(items) and all(same_value(elem, g, w) for g, w in zip(got, items))
    if vtype in (F32, F64):
        return np.float32(got) == np.float32(want) if vtype == F32 else got == want
    return got == want


def cross_check(c, path):
    """The file as @huggingface/gguf reads it is the one the writer meant: every key with its type and value,
    each tensor's name, dims (innermost first), type and offset, and where the data starts."""
    kvs, version, (data, infos) = c.written
    try:
        got = toks.node("gguf", path)[0]
    except RuntimeError as e:
        hint = " (run `npm ci` in tests/tokenizers)" if "@huggingface/gguf" in str(e) else ""
        return c.fail("%s: @huggingface/gguf: %s%s" % (os.path.basename(path), str(e)[-200:], hint))
    meta, bad = got["metadata"], []
    if meta.pop("version")["value"] != version or meta.pop("tensor_count")["value"] != len(infos) or \
            meta.pop("kv_count")["value"] != len(kvs):
        bad.append("the header")
    for key, vtype, value in kvs:
        m = meta.pop(key, None)
        sub = value[0] if vtype == ARRAY else None
        if not m or m["type"] != vtype or m.get("subType") != sub or not same_value(vtype, m["value"], value):
            bad.append("key %s" % key)
    bad += ["extra key %s" % k for k in meta]
    want = [{"name": n, "n_dims": len(d), "shape": d, "dtype": t, "offset": o} for n, d, t, o in infos]
    if got["tensors"] != want or got["data"] != data:
        bad.append("the tensor infos")
    if bad:
        c.fail("%s: @huggingface/gguf reads another file: %s" % (os.path.basename(path), ", ".join(bad[:5])))
    else:
        print("%-28s @huggingface/gguf reads the %d keys and %d tensor infos written" % (
            os.path.basename(path), len(kvs), len(infos)))


def case_tokenizers(c):
    lines = [l for l in toks.corpus(seed=5, n=60) if l.strip()]
    lp = os.path.join(c.tmp, "lines.txt")
    with open(lp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    _, _, (runc, scores) = sp_tokenizer()
    _, _, bpe_json = byte_bpe()
    ref_json = toks.write_json(os.path.join(c.tmp, "bpe_ref.json"), bpe_json)
    want = {"llama": [toks.runc_encode(runc, scores, l) for l in lines],
            "qwen2": [r["ids"] for r in toks.node("hf", ref_json, lp)]}
    for arch, cfg, sd, tok_kvs, version, alignment in models():
        path, _ = write_model(c, arch, cfg, sd, tok_kvs, version, alignment, "q8_0", T_Q8_0)
        cross_check(c, path)
        lua = c.do_import(arch + "_tok", path)
        got = tokenize(c, lua, lp) if lua else None
        if got is None:
            continue
        bad = [i for i in range(len(lines)) if got[i] != want[arch][i]]
        if bad:
            c.fail("%s: line %r: ids %s, reference %s" % (arch, lines[bad[0]], got[bad[0]][:12], want[arch][bad[0]][:12]))
        else:
            print("%-28s %d lines, %d ids as the reference (%s)" % (
                arch + " tokenizer", len(lines), sum(map(len, got)),
                "run.c's encode" if arch == "llama" else "@huggingface/tokenizers"))


def case_errors(c):
    arch, cfg, sd, tok_kvs, version, alignment = llama_model()
    good, _ = write_model(c, arch, cfg, sd, (), 3, 32, "err", T_F32)
    raw = open(good, "rb").read()
    with_tok = open(write_model(c, arch, cfg, sd, tok_kvs, 3, 32, "err_tok", T_F32)[0], "rb").read()
    n_kv = struct.unpack("<Q", raw[16:24])[0]

    def variant(name, data):
        p = os.path.join(c.tmp, name + ".gguf")
        open(p, "wb").write(data)
        return p

    tensors, _ = gguf_tensors(cfg, sd, arch, T_F32)
    kvs = metadata(cfg, arch)
    q4 = [(n, 2 if n == "blk.0.ffn_up.weight" else t, x) for n, t, x in tensors]  # Q4_0's number
    cases = [("bad_magic", b"GGUG" + raw[4:], "not a GGUF file"),
             ("version1", raw[:4] + struct.pack("<I", 1) + raw[8:], "GGUF version 1"),
             ("truncated_header", raw[:20], "truncated"),
             ("short_for_its_counts", raw[:300], "cannot fit in 300 bytes"),
             ("truncated_metadata", with_tok[:with_tok.index(b"tokenizer.ggml.scores") + 100],
              "float32 values, past the end of the file"),
             ("tensor_dims_past_the_end", raw[:1500], "impossible in a file of 1500 bytes"),
             ("truncated_data", raw[:len(raw) - 100], "past the end of the file"),
             ("absurd_counts", raw[:8] + struct.pack("<QQ", 1 << 60, n_kv) + raw[24:], "cannot fit"),
             ("absurd_string", raw[:24] + struct.pack("<Q", 1 << 62) + raw[32:], "past the end of the file"),
             ("unknown_value_type", raw[:24 + 8 + len("general.architecture")] + struct.pack("<I", 77) +
              raw[24 + 8 + len("general.architecture") + 4:], "unknown value type 77"),
             ("tensor_type_q4_0", None, "type Q4_0"),
             ("no_block_count", None, "'llama.block_count' is missing"),
             ("architecture_gpt2", None, "architecture 'gpt2' is not supported")]
    for name, data, want in cases:
        if name == "tensor_type_q4_0":
            path = os.path.join(c.tmp, name + ".gguf")
            write_gguf(path, kvs, q4)
        elif name == "no_block_count":
            path = os.path.join(c.tmp, name + ".gguf")
            write_gguf(path, [kv for kv in kvs if kv[0] != "llama.block_count"], tensors)
        elif name == "architecture_gpt2":
            path = os.path.join(c.tmp, name + ".gguf")
            write_gguf(path, [("general.architecture", STRING, "gpt2")] + kvs[1:], tensors)
        else:
            path = variant(name, data)
        out = os.path.join(c.tmp, "out_" + name)
        p = ic.run([c.ff, "import", path, "-o", out])
        lines = p.stderr.strip().splitlines()
        said = lines[0].split(".gguf: ", 1)[-1] if len(lines) == 1 else ""
        if p.returncode != 1 or want not in said or os.path.exists(out) or p.stdout:
            c.fail("%s: exit %d, stderr %r, DIR %s" % (name, p.returncode, p.stderr.strip(),
                                                        "made" if os.path.exists(out) else "not made"))
        else:
            print("%-20s refused: %s" % (name, lines[0]))


CASES = {"weights": case_weights, "tokenizers": case_tokenizers, "errors": case_errors}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer")
    ap.add_argument("--case", choices=sorted(CASES))
    ap.add_argument("--engines", default="runtime,tcc")
    ap.add_argument("--write", metavar="DIR", help="only write the llama Q8_0 file into DIR (docs/importing.md)")
    args = ap.parse_args()
    if args.write:
        os.makedirs(args.write, exist_ok=True)
        arch, cfg, sd, tok_kvs, version, alignment = llama_model()
        c = argparse.Namespace(tmp=args.write)
        print(write_model(c, arch, cfg, sd, tok_kvs, version, alignment, "q8_0", T_Q8_0, "tiny_" + arch)[0])
        return 0
    if not args.fixformer or not args.case:
        ap.error("--fixformer and --case are required (or --write DIR)")
    return ic.checked(args.fixformer, args.engines, CASES[args.case])


if __name__ == "__main__":
    sys.exit(main())
