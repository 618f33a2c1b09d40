#!/usr/bin/python3
"""`fixformer import` against the checkpoints' own models.

Each case writes a random checkpoint as its publisher lays it out (Hugging
Face names and config.json, one file or shards, or a llama2.c .bin), imports
it with `fixformer import SRC -o DIR`, and holds the result to a reference
written from the published formulas on the original names
(tests/lib/hf_reference.py): `fixformer run DIR/NAME.lua` on each engine within
1e-4 scaled error (max-abs over valid rows / max |reference|), and, for the
decoder models, `fixformer generate --tokens` token for token the reference's
greedy continuation.  q/k weights are N(0, 0.1) (peaked attention), so a RoPE
pairing or a head order mixed up shows.  Families:

  gpt2     GPT2LMHeadModel ("transformer." names, attn.bias/masked_bias buffers,
           a stored tied head) and GPT2Model (no prefix, n_inner, 3 F16 shards)
  llama    LlamaForCausalLM: full heads untied, grouped-query (kv 2 of 8) sharded,
           tied with rope_theta 500000
  qwen2    Qwen2ForCausalLM: q/k/v biases, grouped-query untied, and tied (rope_theta 1e6)
  bert     BertForMaskedLM (bert. names, cls.* and pooler ignored) and BertModel,
           padded batch; the output is the last hidden states
  llama2c  llama2.c: legacy stories15M shape (dim 288, 6 layers, 6 heads, vocab
           32000, shared classifier), legacy GQA with its own classifier,
           version 1 GQA
  errors   bad checkpoints: one stderr line naming the problem, exit 1, no DIR
  tokenizer  a GPT-2 folder with a byte-level tokenizer.json: generate --text as --tokens
  e2e      each family with its tokenizer, as a user has it (LLaMA: SentencePiece-style BPE
           tokenizer.json; GPT-2: byte-level BPE with merges; BERT: WordPiece; llama2.c: version 1
           GQA .bin + tokenizer.bin), built with tests/tokenizers.py's builders: import; for the
           decoders generate --text on each engine = generate --tokens with the ids of the
           independent tokenizer (@huggingface/tokenizers by node, run.c's encode in Python) = the
           PyTorch greedy ids; run on those ids within 1e-4 of PyTorch (BERT: [CLS] ids [SEP], the
           hidden states); emit --with-main (packed weights) + cc -O2 -std=c99 within 1e-5 of the
           runtime, its --tokens decode the PyTorch ids and its --text (the tokenizer compiled in)
           what generate --text prints (BERT: the bytes of the ids' output)

  import_checkpoints.py --fixformer BIN --family F [--engines runtime,tcc,cc]
  import_checkpoints.py --write-e2e DIR     only write the e2e checkpoints (docs/importing.md runs them)
"""
import argparse
import importlib.util
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
import hf_reference as ref  # noqa: E402
from reference import rounded, write_safetensors  # noqa: E402

torch.set_num_threads(1)
TOL = 1e-4


class Rng:
    def __init__(self, seed):
        self.g = np.random.default_rng(seed)

    def n(self, *shape, std=0.02):
        return (self.g.standard_normal(shape) * std).astype(np.float32)

    def norm(self, d):
        return (1.0 + self.g.standard_normal(d) * 0.1).astype(np.float32)


# ---- writing checkpoints as published ---------------------------------------------

def write_hf(folder, config, sd, shards=1, dtype="F32"):
    """config.json + model.safetensors, or shards + model.safetensors.index.json."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), sd, dtype)
        return
    names, weight_map = sorted(sd), {}
    for s in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {k: sd[k] for k in names[s::shards]}
        write_safetensors(os.path.join(folder, file), part, dtype)
        weight_map.update({k: file for k in part})
    total = sum(np.asarray(v).size * 4 for v in sd.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def add_integer_tensor(path, name, array, dtype="I64"):
    """Appends an integer tensor (a buffer such as BERT's position_ids) to a safetensors file."""
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
    blob = np.asarray(array, {"I64": "<i8", "BOOL": "u1"}[dtype]).tobytes()
    header[name] = {"dtype": dtype, "shape": list(np.shape(array)), "data_offsets": [len(data), len(data) + len(blob)]}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data + blob)


L2C_LEGACY = ["tok_embeddings", "attention_norm", "attention.wq", "attention.wk", "attention.wv", "attention.wo",
              "ffn_norm", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3", "norm", "freqs_cos", "freqs_sin"]
L2C_V1 = ["attention_norm", "ffn_norm", "norm", "tok_embeddings", "attention.wq", "attention.wk", "attention.wv",
          "attention.wo", "feed_forward.w1", "feed_forward.w2", "feed_forward.w3"]


def write_llama2c(path, p, w, version):
    """export.py's legacy_export (version 0) or version1_export layout, from llama2.c's module names."""
    hs, L = p["dim"] // p["n_heads"], p["n_layers"]
    freqs = np.outer(np.arange(p["seq_len"]), 1.0 / 10000.0 ** (np.arange(0, hs, 2) / hs)).astype(np.float32)
    tables = {"freqs_cos": np.cos(freqs), "freqs_sin": np.sin(freqs)}
    with open(path, "wb") as f:
        dims = [p["dim"], p["hidden_dim"], L, p["n_heads"], p["n_kv_heads"], p["vocab_size"], p["seq_len"]]
        if version == 0:
            dims[5] = dims[5] if p["shared"] else -dims[5]
            f.write(struct.pack("<7i", *dims))
        else:
            f.write(struct.pack("<Ii7iB", 0x616b3432, version, *dims, int(p["shared"])))
            f.write(b"\0" * (256 - f.tell()))
        for part in (L2C_LEGACY if version == 0 else L2C_V1):
            if part in tables:
                f.write(tables[part].tobytes())
            elif part in ("tok_embeddings", "norm"):
                f.write(w[part + ".weight"].astype("<f4").tobytes())
            else:
                for i in range(L):
                    f.write(w["layers.%d.%s.weight" % (i, part)].astype("<f4").tobytes())
        if not p["shared"]:
            f.write(w["output.weight"].astype("<f4").tobytes())


# ---- random checkpoints -------------------------------------------------------------

def llama_case(seed, d, H, KV, ff, L, V, P, tied=False, theta=10000.0):
    r, dk = Rng(seed), d // H
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": d, "intermediate_size": ff,
           "num_attention_heads": H, "num_key_value_heads": KV, "num_hidden_layers": L, "vocab_size": V,
           "max_position_embeddings": P, "rms_norm_eps": 1e-6, "rope_theta": theta, "rope_scaling": None,
           "tie_word_embeddings": tied, "hidden_act": "silu", "attention_bias": False, "torch_dtype": "float32",
           "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02}
    sd = {"model.embed_tokens.weight": r.n(V, d, std=0.3), "model.norm.weight": r.norm(d)}
    for i in range(L):
        p = "model.layers.%d." % i
        sd.update({p + "input_layernorm.weight": r.norm(d), p + "post_attention_layernorm.weight": r.norm(d),
                   p + "self_attn.q_proj.weight": r.n(d, d, std=0.1), p + "self_attn.k_proj.weight": r.n(KV * dk, d, std=0.1),
                   p + "self_attn.v_proj.weight": r.n(KV * dk, d, std=0.1), p + "self_attn.o_proj.weight": r.n(d, d, std=0.3),
                   p + "mlp.gate_proj.weight": r.n(ff, d, std=0.1), p + "mlp.up_proj.weight": r.n(ff, d, std=0.1),
                   p + "mlp.down_proj.weight": r.n(d, ff, std=0.3)})
    if not tied:
        sd["lm_head.weight"] = r.n(V, d, std=0.1)
    return cfg, sd


def qwen2_case(seed, d, H, KV, ff, L, V, P, tied):
    """Qwen2ForCausalLM: LLaMA's names plus q_proj, k_proj and v_proj biases (none on o_proj or the MLP)."""
    cfg, sd = llama_case(seed, d, H, KV, ff, L, V, P, tied, theta=1000000.0)
    cfg.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2", use_sliding_window=False, sliding_window=P,
               max_window_layers=L, bos_token_id=V - 1, eos_token_id=V - 1)
    del cfg["attention_bias"]
    r, dk = Rng(seed + 100), d // H
    for i in range(L):
        for n, rows in (("q", d), ("k", KV * dk), ("v", KV * dk)):
            sd["model.layers.%d.self_attn.%s_proj.bias" % (i, n)] = r.n(rows, std=0.3)
    return cfg, sd


def gpt2_case(seed, d, H, L, V, P, prefix=True, inner=None, head=True):
    r = Rng(seed)
    ff = inner or 4 * d
    cfg = {"architectures": ["GPT2LMHeadModel" if prefix else "GPT2Model"], "model_type": "gpt2", "n_embd": d,
           "n_head": H, "n_layer": L, "n_positions": P, "n_ctx": P, "vocab_size": V, "n_inner": inner,
           "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "resid_pdrop": 0.1, "embd_pdrop": 0.1,
           "attn_pdrop": 0.1, "scale_attn_weights": True, "use_cache": True, "bos_token_id": V - 1,
           "eos_token_id": V - 1}
    pre = "transformer." if prefix else ""
    sd = {pre + "wte.weight": r.n(V, d, std=0.1), pre + "wpe.weight": r.n(P, d, std=0.1),
          pre + "ln_f.weight": r.norm(d), pre + "ln_f.bias": r.n(d, std=0.05)}
    for i in range(L):
        p = pre + "h.%d." % i
        sd.update({p + "ln_1.weight": r.norm(d), p + "ln_1.bias": r.n(d, std=0.05),
                   p + "attn.c_attn.weight": r.n(d, 3 * d, std=0.1), p + "attn.c_attn.bias": r.n(3 * d),
                   p + "attn.c_proj.weight": r.n(d, d, std=0.1), p + "attn.c_proj.bias": r.n(d),
                   p + "ln_2.weight": r.norm(d), p + "ln_2.bias": r.n(d, std=0.05),
                   p + "mlp.c_fc.weight": r.n(d, ff, std=0.3), p + "mlp.c_fc.bias": r.n(ff),
                   p + "mlp.c_proj.weight": r.n(ff, d, std=0.3), p + "mlp.c_proj.bias": r.n(d)})
        if prefix:  # what GPT2LMHeadModel's state_dict carries besides the weights
            sd[p + "attn.bias"] = np.tril(np.ones((P, P), np.float32))[None, None]
            sd[p + "attn.masked_bias"] = np.array(-1e4, np.float32)
    if head:
        sd["lm_head.weight"] = sd[pre + "wte.weight"]  # tied: stored equal
    return cfg, sd


def bert_case(seed, d, H, ff, L, V, P, types, mlm):
    r = Rng(seed)
    cfg = {"architectures": ["BertForMaskedLM" if mlm else "BertModel"], "model_type": "bert", "hidden_size": d,
           "num_attention_heads": H, "intermediate_size": ff, "num_hidden_layers": L, "vocab_size": V,
           "max_position_embeddings": P, "type_vocab_size": types, "layer_norm_eps": 1e-12, "hidden_act": "gelu",
           "position_embedding_type": "absolute", "pad_token_id": 0, "hidden_dropout_prob": 0.1}
    pre = "bert." if mlm else ""
    sd = {pre + "embeddings.word_embeddings.weight": r.n(V, d, std=0.5),
          pre + "embeddings.position_embeddings.weight": r.n(P, d, std=0.1),
          pre + "embeddings.token_type_embeddings.weight": r.n(types, d, std=0.1),
          pre + "embeddings.LayerNorm.weight": r.norm(d), pre + "embeddings.LayerNorm.bias": r.n(d, std=0.05),
          pre + "pooler.dense.weight": r.n(d, d), pre + "pooler.dense.bias": r.n(d)}
    for i in range(L):
        p = pre + "encoder.layer.%d." % i
        for n in ("query", "key", "value"):
            sd[p + "attention.self.%s.weight" % n] = r.n(d, d, std=0.1)
            sd[p + "attention.self.%s.bias" % n] = r.n(d)
        sd.update({p + "attention.output.dense.weight": r.n(d, d, std=0.1), p + "attention.output.dense.bias": r.n(d),
                   p + "attention.output.LayerNorm.weight": r.norm(d),
                   p + "attention.output.LayerNorm.bias": r.n(d, std=0.05),
                   p + "intermediate.dense.weight": r.n(ff, d, std=0.1), p + "intermediate.dense.bias": r.n(ff),
                   p + "output.dense.weight": r.n(d, ff, std=0.1), p + "output.dense.bias": r.n(d),
                   p + "output.LayerNorm.weight": r.norm(d), p + "output.LayerNorm.bias": r.n(d, std=0.05)})
    if mlm:
        sd.update({"cls.predictions.bias": r.n(V), "cls.predictions.transform.dense.weight": r.n(d, d),
                   "cls.predictions.transform.dense.bias": r.n(d),
                   "cls.predictions.transform.LayerNorm.weight": r.norm(d),
                   "cls.predictions.transform.LayerNorm.bias": r.n(d)})
    return cfg, sd


def llama2c_case(seed, dim, hidden, L, H, KV, V, seq, shared):
    r, dk = Rng(seed), dim // H
    p = {"dim": dim, "hidden_dim": hidden, "n_layers": L, "n_heads": H, "n_kv_heads": KV, "vocab_size": V,
         "seq_len": seq, "shared": shared}
    w = {"tok_embeddings.weight": r.n(V, dim, std=0.3), "norm.weight": r.norm(dim)}
    for i in range(L):
        q = "layers.%d." % i
        w.update({q + "attention_norm.weight": r.norm(dim), q + "ffn_norm.weight": r.norm(dim),
                  q + "attention.wq.weight": r.n(dim, dim, std=0.1), q + "attention.wk.weight": r.n(KV * dk, dim, std=0.1),
                  q + "attention.wv.weight": r.n(KV * dk, dim, std=0.1), q + "attention.wo.weight": r.n(dim, dim, std=0.3),
                  q + "feed_forward.w1.weight": r.n(hidden, dim, std=0.1),
                  q + "feed_forward.w2.weight": r.n(dim, hidden, std=0.3),
                  q + "feed_forward.w3.weight": r.n(hidden, dim, std=0.1)})
    if not shared:
        w["output.weight"] = r.n(V, dim, std=0.1)
    return p, w


# ---- running ----------------------------------------------------------------------

def run(cmd, env=None):
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


class Checker:
    def __init__(self, ff, engines, tmp):
        self.ff, self.engines, self.tmp, self.failures = ff, engines, tmp, 0
        self.env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))

    def fail(self, msg):
        print("FAIL " + msg)
        self.failures += 1

    def do_import(self, name, src, *extra):
        out = os.path.join(self.tmp, "out")
        p = run([self.ff, "import", src, "-o", out, "--name", name] + list(extra))
        if p.returncode != 0:
            self.fail("%s: import exited %d: %s" % (name, p.returncode, p.stderr.strip()))
            return None
        lua = p.stdout.strip().splitlines()[-1]
        if lua != os.path.join(out, name + ".lua") or not os.path.isfile(lua):
            self.fail("%s: import's last line is %r, not the .lua" % (name, lua))
            return None
        print("\n".join("  | " + line for line in p.stdout.splitlines()[:3]))
        return lua

    def forward(self, name, lua, forward, V, T, lengths):
        """run on each engine against forward(ids, lengths) over the valid rows."""
        rng = np.random.default_rng(7)
        ids = rng.integers(0, V, size=(len(lengths), T)).astype(np.int32)
        for b, n in enumerate(lengths):
            ids[b, n:] = 0
        expected = forward(ids, np.array(lengths))
        inp, lens = os.path.join(self.tmp, "in.npy"), os.path.join(self.tmp, "len.npy")
        np.save(inp, ids)
        np.save(lens, np.array(lengths, np.int32))
        for engine in self.engines:
            out = os.path.join(self.tmp, "out_%s.npy" % engine)
            p = run([self.ff, "run", lua, "--input", inp, "--lengths", lens, "--output", out, "--engine", engine],
                    self.env)
            if p.returncode != 0:
                self.fail("%s %s: run exited %d: %s" % (name, engine, p.returncode, p.stderr.strip()))
                continue
            got = np.load(out)
            if got.shape != expected.shape:
                self.fail("%s %s: shape %s, reference %s" % (name, engine, got.shape, expected.shape))
                continue
            err = max(np.abs(got[b, :n] - expected[b, :n]).max() for b, n in enumerate(lengths))
            err /= max(max(np.abs(expected[b, :n]).max() for b, n in enumerate(lengths)), 1e-30)
            print("%-28s %-8s scaled error %.2e" % (name, engine, err))
            if not err <= TOL:
                self.fail("%s %s: scaled error %.3e above %g" % (name, engine, err, TOL))

    def greedy(self, name, lua, forward, V, n_new=6):
        prompt = [int(x) for x in np.random.default_rng(11).integers(3, V, size=4)]
        expected = ref.greedy(forward, prompt, n_new)
        for engine in self.engines:
            p = run([self.ff, "generate", lua, "--tokens", " ".join(map(str, prompt)), "--max-new", str(n_new),
                     "--engine", engine], self.env)
            got = p.stdout.split() if p.returncode == 0 else None
            if got != [str(i) for i in expected]:
                self.fail("%s %s: generate gave %s (%s), reference %s" % (name, engine, got, p.stderr.strip(), expected))
            else:
                print("%-28s %-8s greedy %s identical" % (name, engine, " ".join(got)))


def check_case(c, name, src, fw, V, T, lengths, decoder):
    """import src, then run (and, for a decoder, generate) against fw(ids, lengths)."""
    lua = c.do_import(name, src)
    if lua:
        c.forward(name, lua, fw, V, T, lengths)
        if decoder:
            c.greedy(name, lua, fw, V)


def family_gpt2(c):
    cases = [("gpt2_lmhead", dict(seed=1, d=48, H=4, L=2, V=96, P=32), 1, "F32"),
             ("gpt2_model_f16_sharded", dict(seed=2, d=32, H=2, L=3, V=80, P=24, prefix=False, inner=100, head=False),
              3, "F16")]
    for name, kw, shards, dtype in cases:
        cfg, sd = gpt2_case(**kw)
        src = os.path.join(c.tmp, name)
        mask = sd.pop("transformer.h.1.attn.bias", None)  # recent transformers: a bool buffer
        write_hf(src, cfg, sd, shards, dtype)
        if mask is not None:
            add_integer_tensor(os.path.join(src, "model.safetensors"), "transformer.h.1.attn.bias", mask, "BOOL")
        sd = rounded(sd, dtype)
        fw = lambda ids, lens, cfg=cfg, sd=sd: ref.gpt2_forward(cfg, sd, ids, lens)  # noqa: E731
        check_case(c, name, src, fw, kw["V"], 9, [9, 5], True)
    tokenizer_copies(c)


def tokenizer_copies(c):
    """The tokenizer goes into DIR as NAME.tokenizer.EXT, byte for byte, and the .lua names it:
    tokenizer.json in a folder, tokenizer.bin beside a .bin, or --tokenizer FILE."""
    cfg, sd = gpt2_case(seed=15, d=16, H=2, L=1, V=20, P=8)
    src = os.path.join(c.tmp, "with_tok")
    write_hf(src, cfg, sd)
    tok_json = json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}).encode()
    open(os.path.join(src, "tokenizer.json"), "wb").write(tok_json)
    p, w = llama2c_case(seed=16, dim=16, hidden=32, L=1, H=2, KV=2, V=10, seq=8, shared=True)
    os.makedirs(os.path.join(c.tmp, "l2c"))
    binp = os.path.join(c.tmp, "l2c", "tiny.bin")
    write_llama2c(binp, p, w, 0)
    tok_bin = struct.pack("<i", 8) + b"".join(struct.pack("<fi", 0.0, 1) + bytes([65 + i]) for i in range(10))
    open(os.path.join(c.tmp, "l2c", "tokenizer.bin"), "wb").write(tok_bin)
    other = os.path.join(c.tmp, "other_tokenizer.bin")  # another tokenizer generate loads: other scores
    other_bin = struct.pack("<i", 8) + b"".join(struct.pack("<fi", -i, 1) + bytes([65 + i]) for i in range(10))
    open(other, "wb").write(other_bin)
    for name, src_path, extra, copied, data in [
            ("hf_tok", src, [], "hf_tok.tokenizer.json", tok_json),
            ("l2c_tok", binp, [], "l2c_tok.tokenizer.bin", tok_bin),
            ("l2c_flag", binp, ["--tokenizer", other], "l2c_flag.tokenizer.bin", other_bin)]:
        lua = c.do_import(name, src_path, *extra)
        if not lua:
            continue
        got = open(os.path.join(os.path.dirname(lua), copied), "rb").read()
        if got != data or ('vocabulary = "%s"' % copied) not in open(lua).read():
            c.fail("%s: the tokenizer was not copied to %s and named by the .lua" % (name, copied))
        else:
            print("%-28s tokenizer copied to %s" % (name, copied))


def hf_decoders(c, cases, make):
    """Each case's checkpoint (make(**kw)) imported and held to Hugging Face LLaMA's / Qwen2's formulas."""
    for name, kw, shards in cases:
        cfg, sd = make(**kw)
        src = os.path.join(c.tmp, name)
        write_hf(src, cfg, sd, shards)
        fw = lambda ids, lens, cfg=cfg, sd=sd: ref.llama_forward(cfg, sd, ids, lens)  # noqa: E731
        check_case(c, name, src, fw, kw["V"], 9, [9, 6], True)


def family_llama(c):
    hf_decoders(c, [("llama_mha", dict(seed=3, d=64, H=4, KV=4, ff=160, L=2, V=100, P=64), 1),
                    ("llama_gqa_sharded", dict(seed=4, d=64, H=8, KV=2, ff=172, L=3, V=120, P=48), 2),
                    ("llama_tied_theta", dict(seed=5, d=48, H=4, KV=1, ff=128, L=2, V=90, P=40, tied=True,
                                              theta=500000.0), 1)], llama_case)


def family_qwen2(c):
    hf_decoders(c, [("qwen2_gqa_untied", dict(seed=21, d=64, H=4, KV=2, ff=96, L=2, V=100, P=48, tied=False), 1),
                    ("qwen2_tied", dict(seed=22, d=48, H=6, KV=3, ff=64, L=2, V=80, P=32, tied=True), 1)], qwen2_case)


def family_bert(c):
    cases = [("bert_mlm", dict(seed=6, d=48, H=4, ff=96, L=2, V=90, P=40, types=2, mlm=True)),
             ("bert_model", dict(seed=7, d=32, H=2, ff=64, L=3, V=70, P=24, types=3, mlm=False))]
    for name, kw in cases:
        cfg, sd = bert_case(**kw)
        src = os.path.join(c.tmp, name)
        write_hf(src, cfg, sd)
        if not kw["mlm"]:  # as older BertModel checkpoints store it
            add_integer_tensor(os.path.join(src, "model.safetensors"), "embeddings.position_ids",
                               np.arange(kw["P"])[None])
        fw = lambda ids, lens, cfg=cfg, sd=sd: ref.bert_forward(cfg, sd, ids, lens)  # noqa: E731
        check_case(c, name, src, fw, kw["V"], 10, [10, 6], False)


def family_llama2c(c):
    cases = [("stories15m_legacy", dict(seed=8, dim=288, hidden=768, L=6, H=6, KV=6, V=32000, seq=256, shared=True), 0),
             ("llama2c_gqa_legacy", dict(seed=9, dim=48, hidden=128, L=2, H=6, KV=3, V=64, seq=32, shared=False), 0),
             ("llama2c_gqa_v1", dict(seed=10, dim=64, hidden=172, L=2, H=8, KV=2, V=100, seq=64, shared=False), 1),
             ("llama2c_v1_shared", dict(seed=11, dim=64, hidden=128, L=3, H=4, KV=4, V=50, seq=16, shared=True), 1)]
    for name, kw, version in cases:
        p, w = llama2c_case(**kw)
        src = os.path.join(c.tmp, name + ".bin")
        write_llama2c(src, p, w, version)
        fw = lambda ids, lens, p=p, w=w: ref.llama2c_forward(p, w, ids, lens)  # noqa: E731
        check_case(c, name, src, fw, kw["V"], 8, [8, 5], True)


def byte_level_tokenizer():
    """A GPT-2 style byte-level BPE tokenizer.json without merges: byte b is id b (through GPT-2's
    bytes_to_unicode), <|endoftext|> is 256; so encode(text) = list(text's UTF-8 bytes)."""
    vocab = {c: b for b, c in tokenizers_tests().bytes_to_unicode().items()}
    vocab["<|endoftext|>"] = 256
    level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "normalizer": None,
            "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": True, "special": True}],
            "pre_tokenizer": dict(level, type="ByteLevel"), "post_processor": dict(level, type="ByteLevel"),
            "decoder": dict(level, type="ByteLevel"),
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                      "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                      "merges": []}}


def family_tokenizer(c):
    """An imported GPT-2 folder with its tokenizer.json: `generate --text` needs no other flag and
    continues exactly as `--tokens` with the text's ids (its bytes), printing the continuation's bytes."""
    cfg, sd = gpt2_case(seed=21, d=48, H=4, L=2, V=257, P=64)
    src = os.path.join(c.tmp, "gpt2_text")
    write_hf(src, cfg, sd)
    with open(os.path.join(src, "tokenizer.json"), "w") as f:
        json.dump(byte_level_tokenizer(), f)
    lua = c.do_import("gpt2_text", src)
    text = "hi there, caf\u00e9"
    for engine in c.engines if lua else []:
        a = subprocess.run([c.ff, "generate", lua, "--text", text, "--max-new", "6", "--ids", "--engine", engine],
                           capture_output=True, env=c.env)
        b = subprocess.run([c.ff, "generate", lua, "--tokens", " ".join(map(str, text.encode())), "--max-new", "6",
                            "--ids", "--engine", engine], capture_output=True, env=c.env)
        ids, _, shown = a.stdout.rstrip(b"\n").partition(b"\t")
        want = bytes(int(i) for i in ids.split() if int(i) < 256)
        if a.returncode or b.returncode or a.stdout != b.stdout or shown != want:
            c.fail("gpt2_text %s: --text gave %r (%r), --tokens %r" % (engine, a.stdout, a.stderr, b.stdout))
        else:
            print("%-28s %-8s --text continues as --tokens: %s" % ("gpt2_text", engine, ids.decode()))


def family_errors(c):
    """Each bad checkpoint: exit 1, one stderr line with the expected piece, DIR not created."""
    cfg, sd = gpt2_case(seed=12, d=16, H=2, L=2, V=20, P=8)

    def hf(name, config=cfg, weights=sd, shards=1):
        src = os.path.join(c.tmp, "bad_" + name)
        write_hf(src, config, weights, shards)
        return src

    def l2c(name, version=0, cut=0, patch=None):
        p, w = llama2c_case(seed=13, dim=16, hidden=32, L=1, H=2, KV=2, V=10, seq=8, shared=True)
        path = os.path.join(c.tmp, name + ".bin")
        write_llama2c(path, p, w, version)
        data = bytearray(open(path, "rb").read())
        if patch:
            data[patch[0]:patch[0] + len(patch[1])] = patch[1]
        open(path, "wb").write(bytes(data[:len(data) - cut]))
        return path

    wrong = dict(sd)
    wrong["transformer.h.1.mlp.c_fc.weight"] = wrong["transformer.h.1.mlp.c_fc.weight"][:, :60]
    extra = dict(sd, **{"transformer.h.0.attn.rotary.weight": np.zeros(4, np.float32)})
    missing = {k: v for k, v in sd.items() if k != "transformer.h.1.ln_2.bias"}
    int_buffer = hf("int_buffer")
    add_integer_tensor(os.path.join(int_buffer, "model.safetensors"), "transformer.h.0.attn.step", [3])
    sharded = hf("missing_shard", shards=2)
    os.remove(os.path.join(sharded, "model-00002-of-00002.safetensors"))
    llama_cfg = llama_case(seed=14, d=16, H=2, KV=2, ff=32, L=1, V=10, P=8)[0]
    cases = [
        ("unknown model_type", hf("mistral", dict(cfg, model_type="mistral")),
         "config.json: model_type 'mistral' is not supported (fixformer imports llama, qwen2, gpt2, bert, marian)"),
        ("missing shard", sharded,
         "model.safetensors.index.json: shard 'model-00002-of-00002.safetensors' is missing"),
        ("wrong shape", hf("shape", weights=wrong),
         "tensor 'transformer.h.1.mlp.c_fc.weight': shape [16,60], config.json needs [16,64]"),
        ("unmapped tensor", hf("extra", weights=extra),
         "tensor 'transformer.h.0.attn.rotary.weight' cannot be mapped to a gpt2 model"),
        ("integer tensor", int_buffer,
         "tensor 'transformer.h.0.attn.step' (I64) cannot be mapped to a gpt2 model (weights are floats)"),
        ("missing tensor", hf("missing", weights=missing), "bad_missing/model.safetensors: missing tensor 'h.1.ln_2.bias' [16] (prefix 'transformer.' optional)"),
        ("unsupported setting", hf("rope_scaling", dict(llama_cfg, rope_scaling={"type": "linear", "factor": 2.0}),
                                   llama_case(seed=14, d=16, H=2, KV=2, ff=32, L=1, V=10, P=8)[1]),
         "config.json: 'rope_scaling': RoPE scaling is not supported"),
        ("unsupported activation", hf("act", dict(cfg, activation_function="quick_gelu")),
         "config.json: 'activation_function': not one of gelu_new"),
        ("truncated .bin", l2c("truncated", cut=100), "truncated.bin: truncated: 11256 bytes, but its header (dim 16, hidden_dim 32, 1 layers"),
        ("llama2.c int8", l2c("q80", version=1, patch=(4, struct.pack("<i", 2))),
         "llama2.c version 2 (int8 Q8_0) is not supported"),
        ("not a model folder", c.tmp + "/nothing_here", "nothing_here: No such file or directory"),
        ("a file of the folder", os.path.join(sharded, "config.json"),
         "config.json: give the model folder (with config.json), not one of its files"),
    ]
    keep = os.path.join(c.tmp, "keep")
    os.makedirs(keep)
    open(os.path.join(keep, "bad_shape.lua"), "w").write("-- an earlier import\n")
    p = run([c.ff, "import", cases[2][1], "-o", keep])
    if p.returncode != 1 or os.listdir(keep) != ["bad_shape.lua"] or \
            open(os.path.join(keep, "bad_shape.lua")).read() != "-- an earlier import\n":
        c.fail("a failed import over an earlier one changed %s: %s" % (keep, os.listdir(keep)))
    cases.append(("bad --name", c.tmp + "/bad_shape", "--name: 'a-b' is not a C identifier", ["--name", "a-b"]))
    for what, src, piece, *extra in cases:
        out = os.path.join(c.tmp, "bad_out")
        p = run([c.ff, "import", src, "-o", out] + (extra[0] if extra else []))
        lines = p.stderr.strip().splitlines()
        if p.returncode != 1 or len(lines) != 1 or piece not in lines[0] or os.path.exists(out):
            c.fail("%s: exit %d, stderr %r, %s; wanted one line containing %r" % (
                what, p.returncode, p.stderr, "DIR written" if os.path.exists(out) else "no DIR", piece))
        else:
            print("%-24s %s" % (what, lines[0]))


# ---- e2e: checkpoint + tokenizer -> import -> generate --text / run -> emit + cc ------

def tokenizers_tests():
    """tests/tokenizers.py as a module: its tokenizer builders and references (node, run.c's encode)."""
    spec = importlib.util.spec_from_file_location("tokenizers_tests", os.path.join(HERE, "tokenizers.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


E2E_MERGES = [("Ġ", "w"), ("o", "r"), ("Ġw", "or"), ("l", "d"), ("Ġwor", "ld"), ("H", "e"), ("l", "l"),
              ("He", "ll"), ("Hell", "o"), ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("c", "a"), ("ca", "f")]


def byte_level_with_merges():
    """byte_level_tokenizer() with E2E_MERGES: their tokens get ids 257, 258, ..."""
    j = byte_level_tokenizer()
    for a, b in E2E_MERGES:
        j["model"]["vocab"].setdefault(a + b, len(j["model"]["vocab"]))
    j["model"]["merges"] = ["%s %s" % m for m in E2E_MERGES]
    return j


def hf_ids(tk, tokenizer, text, tmp):
    """@huggingface/tokenizers' ids of text (no special tokens added)."""
    lines = os.path.join(tmp, "text.txt")
    with open(lines, "w", encoding="utf-8") as f:
        f.write(text + "\n")
    return tk.node("hf", tokenizer, lines)[0]["ids"]


def e2e_cases(folder, tk):
    """Writes each family's checkpoint with its tokenizer into folder (e2e_llama, e2e_gpt2, e2e_bert,
    e2e_qwen2, e2e_l2c/model.bin) and yields (name, src folder or .bin, V, text, ids() the reference's prompt ids,
    forward, eos or None (BERT))."""
    vocab, merges = tk.train_sp(tk.corpus(), 120)
    V = len(vocab)
    cfg, sd = llama_case(seed=31, d=32, H=4, KV=2, ff=72, L=2, V=V, P=64)
    src = os.path.join(folder, "e2e_llama")
    write_hf(src, cfg, sd)
    tok = tk.write_json(os.path.join(src, "tokenizer.json"), tk.sp_json(vocab, merges, False))
    text = "Hello café world 中文 😀"
    yield ("llama", src, V, text, lambda tok=tok, text=text: [1] + hf_ids(tk, tok, text, folder),
           lambda ids, lens, cfg=cfg, sd=sd: ref.llama_forward(cfg, sd, ids, lens), 2)

    j = byte_level_with_merges()
    cfg, sd = gpt2_case(seed=32, d=32, H=4, L=2, V=len(j["model"]["vocab"]), P=48)
    cfg["bos_token_id"] = cfg["eos_token_id"] = 256
    src = os.path.join(folder, "e2e_gpt2")
    write_hf(src, cfg, sd)
    tok = tk.write_json(os.path.join(src, "tokenizer.json"), j)
    text = "Hello world, the café 😀"
    yield ("gpt2", src, cfg["vocab_size"], text, lambda tok=tok, text=text: hf_ids(tk, tok, text, folder),
           lambda ids, lens, cfg=cfg, sd=sd: ref.gpt2_forward(cfg, sd, ids, lens), 256)

    j = tk.wordpiece_json()
    cfg, sd = bert_case(seed=33, d=32, H=4, ff=64, L=2, V=len(j["model"]["vocab"]), P=40, types=2, mlm=False)
    src = os.path.join(folder, "e2e_bert")
    write_hf(src, cfg, sd)
    tok = tk.write_json(os.path.join(src, "tokenizer.json"), j)
    text = "Hello, world! The quick brown fox jumps over the lazy dog, café 中文."
    cls_sep = [j["model"]["vocab"]["[CLS]"], j["model"]["vocab"]["[SEP]"]]
    yield ("bert", src, cfg["vocab_size"], text,
           lambda tok=tok, text=text: cls_sep[:1] + hf_ids(tk, tok, text, folder) + cls_sep[1:],
           lambda ids, lens, cfg=cfg, sd=sd: ref.bert_forward(cfg, sd, ids, lens), None)

    spec = importlib.util.spec_from_file_location("tokenizers_split", os.path.join(HERE, "tokenizers_split.py"))
    ts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ts)
    j = dict(ts.tokenizers(*ts.train_bytelevel(tk.corpus(), 200)))["qwen2"]  # Qwen2's Split pattern and NFC
    cfg, sd = qwen2_case(seed=35, d=32, H=4, KV=2, ff=64, L=2, V=len(j["model"]["vocab"]), P=64, tied=True)
    src = os.path.join(folder, "e2e_qwen2")
    write_hf(src, cfg, sd)
    tok = tk.write_json(os.path.join(src, "tokenizer.json"), j)
    text = "Hello café world 12345 😀"
    yield ("qwen2", src, cfg["vocab_size"], text, lambda tok=tok, text=text: hf_ids(tk, tok, text, folder),
           lambda ids, lens, cfg=cfg, sd=sd: ref.llama_forward(cfg, sd, ids, lens), j["model"]["vocab"]["<|endoftext|>"])

    p, w = llama2c_case(seed=34, dim=48, hidden=96, L=2, H=6, KV=2, V=V, seq=64, shared=False)
    os.makedirs(os.path.join(folder, "e2e_l2c"), exist_ok=True)
    src = os.path.join(folder, "e2e_l2c", "model.bin")
    write_llama2c(src, p, w, 1)
    toks, scores = tk.write_llama2c(os.path.join(folder, "e2e_l2c", "tokenizer.bin"), vocab, merges)
    text = tk.GEN_TEXT
    yield ("llama2c", src, V, text, lambda: [1] + tk.runc_encode(toks, scores, text),
           lambda ids, lens, p=p, w=w: ref.llama2c_forward(p, w, ids, lens), 2)


E2E_NEW = 6


def e2e_generate(c, name, lua, text, ids, fw, eos, n_new=E2E_NEW):
    """generate --text == generate --tokens (the reference tokenizer's ids) == PyTorch's greedy ids."""
    want = ref.greedy(fw, ids, n_new)
    if eos in want:
        want = want[:want.index(eos) + 1]  # generate stops at EOS (printed)
    for engine in c.engines:
        common = ["--max-new", str(n_new), "--ids", "--engine", engine]
        # bytes: the continuation of random weights need not be whole UTF-8 characters
        a = subprocess.run([c.ff, "generate", lua, "--text", text] + common, capture_output=True, env=c.env)
        b = subprocess.run([c.ff, "generate", lua, "--tokens", " ".join(map(str, ids))] + common,
                           capture_output=True, env=c.env)
        got = a.stdout.split(b"\t")[0].split()
        if a.returncode or b.returncode or a.stdout != b.stdout or got != [b"%d" % i for i in want]:
            c.fail("e2e %s %s: --text gave %r (%r), --tokens %r, PyTorch %s" % (
                name, engine, a.stdout, a.stderr.strip(), b.stdout, want))
        else:
            print("%-8s %-8s generate --text = --tokens = PyTorch: %s" % (name, engine, b" ".join(got).decode()))
    return want


def e2e_run(c, name, lua, text, ids, fw):
    """run on the text's ids on each engine within TOL of PyTorch, and run --text byte for byte the same;
    returns the ids' file."""
    inp = os.path.join(c.tmp, name + "_ids.npy")
    np.save(inp, np.array([ids], np.int32))
    expected = fw(np.array([ids]), np.array([len(ids)]))
    for engine in c.engines:
        out = os.path.join(c.tmp, "%s_%s.npy" % (name, engine))
        p = run([c.ff, "run", lua, "--input", inp, "--output", out, "--engine", engine], c.env)
        if p.returncode:
            c.fail("e2e %s %s: run exited %d: %s" % (name, engine, p.returncode, p.stderr.strip()))
            continue
        err = np.abs(np.load(out) - expected).max() / np.abs(expected).max()
        by_text = os.path.join(c.tmp, "%s_%s_text.npy" % (name, engine))
        p = run([c.ff, "run", lua, "--text", text, "--output", by_text, "--engine", engine], c.env)
        same = p.returncode == 0 and open(by_text, "rb").read() == open(out, "rb").read()
        print("%-8s %-8s run: scaled error %.2e against PyTorch; run --text %s" % (
            name, engine, err, "the same bytes" if same else "DIFFERS"))
        if not err <= TOL or not same:
            c.fail("e2e %s %s: scaled error %.3e above %g, or run --text differs (%s)" % (
                name, engine, err, TOL, p.stderr.strip()))
    return inp


def e2e_emitted(c, name, lua, inp, text, prompt=None, want=None):
    """emit --with-main (packed weights), cc -O2 -std=c99, run on the ids: within 1e-5 of the runtime;
    a decoder's driver given --tokens prompt decodes want (PyTorch's greedy ids), and given --text
    (its tokenizer compiled in) prints what generate --text prints; an encoder's driver given --text
    writes the bytes it writes for the ids."""
    out_dir, model = os.path.join(c.tmp, name + "_emit"), os.path.basename(lua)[:-4]
    ref_out, got = os.path.join(c.tmp, name + "_rt.npy"), os.path.join(out_dir, "out.npy")
    exe = os.path.join(out_dir, model)
    steps = [[c.ff, "run", lua, "--input", inp, "--output", ref_out, "--engine", "runtime"],
             [c.ff, "emit", lua, "-o", out_dir, "--with-main"],
             os.environ.get("CC", "cc").split() + ["-O2", "-std=c99", "-o", exe, exe + ".c", exe + "_main.c", "-lm"],
             [exe, "--weights", exe + ".weights", "--input", inp, "--output", got]]
    for cmd in steps:
        p = run(cmd, c.env)
        if p.returncode:
            c.fail("e2e %s emitted: %s exited %d: %s" % (name, cmd[0], p.returncode, p.stderr.strip()[-500:]))
            return
    a, b = np.load(got), np.load(ref_out)
    err = np.abs(a - b).max() / np.abs(b).max() if a.shape == b.shape else float("inf")
    print("%-8s emitted  cc -O2 on the ids: scaled error %.2e against the runtime" % (name, err))
    if not err <= 1e-5:
        c.fail("e2e %s emitted: scaled error %.3e (shape %s, runtime %s)" % (name, err, a.shape, b.shape))
    if prompt is None:
        by_text = os.path.join(out_dir, "text.npy")
        p = run([exe, "--weights", exe + ".weights", "--text", text, "--output", by_text], c.env)
        if p.returncode or open(by_text, "rb").read() != open(got, "rb").read():
            c.fail("e2e %s emitted: --text (exit %d: %s) differs from the ids' output" % (name, p.returncode,
                                                                                       p.stderr.strip()))
        else:
            print("%-8s emitted  --text: the same bytes as on the reference tokenizer's ids" % name)
        return
    p = subprocess.run([exe, "--weights", exe + ".weights", "--tokens", " ".join(map(str, prompt)), "--max-new",
                        str(E2E_NEW)], capture_output=True, env=c.env)
    if p.returncode or p.stdout.split() != [b"%d" % i for i in want]:
        c.fail("e2e %s emitted: --tokens gave %r (%r), PyTorch %s" % (name, p.stdout, p.stderr, want))
    else:
        print("%-8s emitted  --tokens (greedy, key/value cache) = PyTorch: %s" % (name, p.stdout.decode().strip()))
    common = ["--text", text, "--max-new", str(E2E_NEW), "--ids"]
    p = subprocess.run([exe, "--weights", exe + ".weights"] + common, capture_output=True, env=c.env)
    g = subprocess.run([c.ff, "generate", lua, "--engine", "runtime"] + common, capture_output=True, env=c.env)
    if p.returncode or p.stdout != g.stdout or p.stdout.split(b"\t")[0].split() != [b"%d" % i for i in want]:
        c.fail("e2e %s emitted: --text gave %r (%r), generate --text %r, PyTorch %s" % (name, p.stdout, p.stderr,
                                                                                      g.stdout, want))
    else:
        print("%-8s emitted  --text = generate --text: %s" % (name, p.stdout.decode("utf-8", "replace").strip()))


def family_e2e(c):
    """Each family with its tokenizer, as a user has it: import, then generate --text (run for BERT),
    then emit + cc."""
    tk = tokenizers_tests()
    if not os.path.isdir(os.path.join(tk.NODE_DIR, "node_modules")):
        c.fail("tests/tokenizers/node_modules is missing: run `npm ci` in tests/tokenizers")
        return
    for name, src, V, text, ids, fw, eos in e2e_cases(c.tmp, tk):
        lua = c.do_import("e2e_" + name, src)
        if not lua:
            continue
        ids = ids()
        print("%-8s %d prompt ids of %r (reference tokenizer): %s" % (name, len(ids), text, " ".join(map(str, ids))))
        want = e2e_generate(c, name, lua, text, ids, fw, eos) if eos is not None else None
        inp = e2e_run(c, name, lua, text, ids, fw)
        e2e_emitted(c, name, lua, inp, text, ids if want else None, want)


FAMILIES = {"gpt2": family_gpt2, "llama": family_llama, "qwen2": family_qwen2, "bert": family_bert, "llama2c": family_llama2c,
            "errors": family_errors, "tokenizer": family_tokenizer,
            "e2e": family_e2e}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer")
    ap.add_argument("--family", choices=sorted(FAMILIES))
    ap.add_argument("--engines", default="runtime,tcc,cc")
    ap.add_argument("--write-e2e", metavar="DIR", help="only write the e2e checkpoints into DIR (the docs' examples)")
    args = ap.parse_args()
    if args.write_e2e:
        os.makedirs(args.write_e2e, exist_ok=True)
        for case in e2e_cases(args.write_e2e, tokenizers_tests()):
            print(case[1])
        return 0
    if not args.fixformer or not args.family:
        ap.error("--fixformer and --family are required (or --write-e2e DIR)")
    return checked(args.fixformer, args.engines, FAMILIES[args.family])


def checked(fixformer, engines, case):
    """case(Checker) in a temporary folder: 0, or 1 after its failures."""
    with tempfile.TemporaryDirectory() as tmp:
        c = Checker(os.path.abspath(fixformer), engines.split(","), tmp)
        case(c)
    if c.failures:
        print("%d failure(s)" % c.failures)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
