#!/usr/bin/env python3
"""Marian (Hugging Face's MarianMTModel, the OPUS-MT translators) imported
and run against references written here from Hugging Face's definition.

The test writes a small German->English Marian folder as MarianMTModel
saves one: config.json, model.safetensors (model.shared, the encoder and
decoder layers under Marian's names, final_logits_bias [1, V]; the
embed_positions and embed_tokens copies HF leaves out, added here to one
case), source.spm and target.spm trained by the sentencepiece library
(Debian's python3-sentencepiece) on generated German and English number
words, and vocab.json (their pieces numbered, </s> 0, <unk> 1, <pad> last).

Checked: `fixformer import` of the folder; the ids of `fixformer tokenize`
equal MarianTokenizer's (source.spm's pieces through vocab.json, </s>
last); logits of `fixformer run` (runtime, tcc, cc) within 1e-5 scaled of a
PyTorch forward of MarianMTModel's layout (static sinusoidal positions with
sines in the first half, sqrt(d)-scaled shared embeddings, post-LN layers,
SiLU, final_logits_bias); `generate --text` (decoder start = pad) equals
the reference's greedy ids and their text as target pieces joined, and
`generate --beam N --text` Hugging Face's beam search (tests/beam.py's) on
the reference's logits; the emitted program prints what generate prints
(greedy and beam); broken folders refused with one line and nothing
written.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
sys.path.insert(0, HERE)
from reference import write_safetensors  # noqa: E402

SP = "\u2581"
DE = "eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf zwanzig dreißig hundert tausend und".split()
EN = "one two three four five six seven eight nine ten eleven twelve twenty thirty hundred thousand and".split()


def corpora(seed=3, n=1500):
    rnd = random.Random(seed)
    de, en = [], []
    for _ in range(n):
        k = [rnd.randrange(len(DE)) for _ in range(rnd.randint(1, 5))]
        de.append("".join(DE[i] for i in k) if rnd.random() < 0.5 else " ".join(DE[i] for i in k))
        en.append(" ".join(EN[i] for i in k))
    return de, en


def train_spm(tmp, name, lines, size):
    import sentencepiece as spm
    text = os.path.join(tmp, name + ".txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    prefix = os.path.join(tmp, name)
    spm.SentencePieceTrainer.train(input=text, model_prefix=prefix, vocab_size=size, model_type="unigram",
                                   character_coverage=1.0, bos_id=-1, eos_id=0, unk_id=1, hard_vocab_limit=False,
                                   minloglevel=2)
    return prefix + ".model", spm.SentencePieceProcessor(model_file=prefix + ".model")


def vocab_of(src, tgt):
    """vocab.json as OPUS-MT's: </s> 0, <unk> 1, the pieces of both models, <pad> last"""
    pieces = ["</s>", "<unk>"]
    for sp in (src, tgt):
        for i in range(sp.get_piece_size()):
            p = sp.id_to_piece(i)
            if p not in pieces:
                pieces.append(p)
    pieces.append("<pad>")
    return {p: i for i, p in enumerate(pieces)}


def marian_positions(n, d):
    """MarianSinusoidalPositionalEmbedding._init_weight, in numpy float64 as Hugging Face computes it"""
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / d) for j in range(d)] for pos in range(n)])
    out = np.empty((n, d), dtype=np.float32)
    half = d // 2 if d % 2 == 0 else d // 2 + 1
    out[:, :half] = np.sin(enc[:, 0::2])
    out[:, half:] = np.cos(enc[:, 1::2])
    return torch.from_numpy(out)


def random_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    d, f, V = cfg["d_model"], cfg["encoder_ffn_dim"], cfg["vocab_size"]

    def n(*shape, std=0.3):
        return torch.randn(*shape, generator=g) * std
    sd = {"model.shared.weight": n(V, d, std=0.5), "final_logits_bias": n(1, V, std=0.2)}
    for stack, count in (("encoder", cfg["encoder_layers"]), ("decoder", cfg["decoder_layers"])):
        for i in range(count):
            p = "model.%s.layers.%d." % (stack, i)
            for att in ("self_attn",) + (("encoder_attn",) if stack == "decoder" else ()):
                for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    sd[p + att + "." + m + ".weight"], sd[p + att + "." + m + ".bias"] = n(d, d), n(d, std=0.1)
                sd[p + att + "_layer_norm.weight"], sd[p + att + "_layer_norm.bias"] = 1 + n(d, std=0.1), n(d, std=0.1)
            sd[p + "fc1.weight"], sd[p + "fc1.bias"] = n(f, d), n(f, std=0.1)
            sd[p + "fc2.weight"], sd[p + "fc2.bias"] = n(d, f), n(d, std=0.1)
            sd[p + "final_layer_norm.weight"], sd[p + "final_layer_norm.bias"] = 1 + n(d, std=0.1), n(d, std=0.1)
    return sd


class Marian:
    """MarianMTModel's forward (modeling_marian.py) on a state dict, float64"""

    def __init__(self, cfg, sd):
        self.c, self.w = cfg, {k: v.double() for k, v in sd.items()}
        self.pos = marian_positions(cfg["max_position_embeddings"], cfg["d_model"]).double()
        self.H = cfg["encoder_attention_heads"]

    def attn(self, p, x, mem, causal):
        W, (T, d), S = self.w, x.shape, mem.shape[0]
        dk = d // self.H
        q = F.linear(x, W[p + ".q_proj.weight"], W[p + ".q_proj.bias"]).view(T, self.H, dk).transpose(0, 1)
        k = F.linear(mem, W[p + ".k_proj.weight"], W[p + ".k_proj.bias"]).view(S, self.H, dk).transpose(0, 1)
        v = F.linear(mem, W[p + ".v_proj.weight"], W[p + ".v_proj.bias"]).view(S, self.H, dk).transpose(0, 1)
        s = q @ k.transpose(1, 2) * dk ** -0.5
        if causal:
            s = s.masked_fill(torch.triu(torch.ones(T, S, dtype=torch.bool), 1), float("-inf"))
        o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, d)
        return F.linear(o, W[p + ".out_proj.weight"], W[p + ".out_proj.bias"])

    def norm(self, p, x):
        return F.layer_norm(x, x.shape[-1:], self.w[p + ".weight"], self.w[p + ".bias"], 1e-5)

    def ffn(self, p, x):
        W = self.w
        return F.linear(F.silu(F.linear(x, W[p + "fc1.weight"], W[p + "fc1.bias"])), W[p + "fc2.weight"],
                        W[p + "fc2.bias"])

    def embed(self, ids):
        return self.w["model.shared.weight"][ids] * math.sqrt(self.c["d_model"]) + self.pos[:len(ids)]

    def encode(self, src):
        x = self.embed(src)
        for i in range(self.c["encoder_layers"]):
            p = "model.encoder.layers.%d." % i
            x = self.norm(p + "self_attn_layer_norm", x + self.attn(p + "self_attn", x, x, False))
            x = self.norm(p + "final_layer_norm", x + self.ffn(p, x))
        return x

    def logits(self, src, tgt):
        mem, y = self.encode(src), self.embed(tgt)
        for i in range(self.c["decoder_layers"]):
            p = "model.decoder.layers.%d." % i
            y = self.norm(p + "self_attn_layer_norm", y + self.attn(p + "self_attn", y, y, True))
            y = self.norm(p + "encoder_attn_layer_norm", y + self.attn(p + "encoder_attn", y, mem, False))
            y = self.norm(p + "final_layer_norm", y + self.ffn(p, y))
        return y @ self.w["model.shared.weight"].T + self.w["final_logits_bias"][0]

    def greedy(self, src, n_new):
        out = [self.c["decoder_start_token_id"]]
        for _ in range(n_new):
            nxt = int(self.logits(src, out)[-1].argmax())
            out.append(nxt)
            if nxt == self.c["eos_token_id"]:
                break
        return out[1:]


def config(V, d=16, heads=2, ffn=32, enc=2, dec=2, positions=64):
    return {"model_type": "marian", "architectures": ["MarianMTModel"], "d_model": d, "encoder_layers": enc,
            "decoder_layers": dec, "encoder_attention_heads": heads, "decoder_attention_heads": heads,
            "encoder_ffn_dim": ffn, "decoder_ffn_dim": ffn, "vocab_size": V, "decoder_vocab_size": V,
            "max_position_embeddings": positions, "activation_function": "swish", "scale_embedding": True,
            "share_encoder_decoder_embeddings": True, "tie_word_embeddings": True, "static_position_embeddings": True,
            "pad_token_id": V - 1, "eos_token_id": 0, "decoder_start_token_id": V - 1, "normalize_before": False}


def write_folder(folder, cfg, sd, spm_src, spm_tgt, vocab, copies=False):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    sd = dict(sd)
    if copies:  # what an older save_pretrained kept: the stacks' embeddings and the static positions
        for stack in ("encoder", "decoder"):
            sd["model.%s.embed_tokens.weight" % stack] = sd["model.shared.weight"]
            sd["model.%s.embed_positions.weight" % stack] = marian_positions(cfg["max_position_embeddings"],
                                                                             cfg["d_model"])
    write_safetensors(os.path.join(folder, "model.safetensors"), {k: v.numpy() for k, v in sd.items()})
    for name, src in (("source.spm", spm_src), ("target.spm", spm_tgt)):
        with open(src, "rb") as a, open(os.path.join(folder, name), "wb") as b:
            b.write(a.read())
    with open(os.path.join(folder, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


class Check:
    def __init__(self):
        self.failures = 0

    def __call__(self, name, ok, detail=""):
        print("%-34s %s  %s" % (name, "ok" if ok else "FAIL", detail))
        self.failures += not ok


def marian_ids(sp, vocab, text):
    """MarianTokenizer: source.spm's pieces, numbered by vocab.json (<unk> else), then </s>"""
    return [vocab.get(p, vocab["<unk>"]) for p in sp.encode(text, out_type=str)] + [vocab["</s>"]]


def check_model(ff, tmp, check, name, folder, model, sp_src, vocab, texts, engines):
    inv = {i: p for p, i in vocab.items()}
    out = os.path.join(tmp, name + "_out")
    p = run([ff, "import", folder, "-o", out, "--name", name])
    check(name + " import", p.returncode == 0, (p.stderr or p.stdout).strip().splitlines()[-1][:90])
    if p.returncode:
        return
    lua = os.path.join(out, name + ".lua")
    for text in texts:
        want = marian_ids(sp_src, vocab, text)
        t = run([ff, "tokenize", lua, "--text", text])
        got = [int(x) for x in t.stdout.split()] if t.returncode == 0 else None
        check(name + " tokenize %r" % text[:18], got == want, "%s" % (got if got != want else len(want)))
        src = torch.tensor(want)
        tgt = [model.c["decoder_start_token_id"]] + want[:3]
        ref = model.logits(src, tgt).float().numpy()
        npy = os.path.join(tmp, name + "_src.npy")
        np.save(npy, np.array([want], dtype=np.int32))
        tnpy = os.path.join(tmp, name + "_tgt.npy")
        np.save(tnpy, np.array([tgt], dtype=np.int32))
        for engine in engines:
            o = os.path.join(tmp, "%s_%s.npy" % (name, engine))
            r = run([ff, "run", lua, "--input", npy, "--target-input", tnpy, "--output", o, "--engine", engine])
            if r.returncode:
                check(name + " run " + engine, False, r.stderr.strip()[-200:])
                continue
            err = float(np.abs(np.load(o)[0] - ref).max() / np.abs(ref).max())
            check(name + " logits %s %r" % (engine, text[:10]), err <= 1e-5, "scaled error %.2e" % err)
        ids = model.greedy(src, 8)
        for engine in engines:
            g = run([ff, "generate", lua, "--text", text, "--max-new", "8", "--ids", "--engine", engine])
            got_ids = [int(x) for x in g.stdout.split("\t")[0].split()] if g.returncode == 0 else None
            words = "".join(inv[i] for i in ids if i not in (vocab["</s>"], vocab["<pad>"]))
            want_text = words.replace(SP, " ").lstrip(" ")
            got_text = g.stdout.rstrip("\n").split("\t")[1] if g.returncode == 0 and "\t" in g.stdout else None
            check(name + " generate %s %r" % (engine, text[:10]), got_ids == ids and got_text == want_text,
                  "%s | %r" % (" ".join(map(str, ids)), want_text[:30]) if got_ids == ids else
                  "got %s %r, want %s %r %s" % (got_ids, got_text, ids, want_text, g.stderr.strip()[-200:]))


def check_beam(ff, check, lua, model, sp_src, vocab, texts):
    """generate --beam --text: Hugging Face's beam search (tests/beam.py's, from its definition) on the
    reference's logits, ids equal and scores within 1e-4"""
    import beam
    for text in texts:
        src = torch.tensor(marian_ids(sp_src, vocab, text))

        def next_logits(seqs):
            return torch.stack([model.logits(src, [model.c["decoder_start_token_id"]] + s)[-1] for s in seqs]).float()
        for n, lp, es in ((3, 1.0, "true"), (2, 0.5, "never")):
            want, score = beam.hf_beam_search(next_logits, n, lp, beam.early(es), model.c["eos_token_id"], 6)
            g = run([ff, "generate", lua, "--text", text, "--beam", str(n), "--length-penalty", repr(lp),
                     "--early-stopping", es, "--max-new", "6", "--ids", "--score"])
            parts = g.stdout.split("\t") if g.returncode == 0 else []
            got = [int(x) for x in parts[1].split()] if len(parts) > 1 else None
            ok = got == want and abs(float(parts[0]) - score) <= 1e-4
            check("marian beam %d %s %r" % (n, es, text[:10]), ok, "%s (%.5f)" % (want, score) if ok else
                  "got %r %s, want %s (%.5f)" % (g.stdout.strip()[:80], g.stderr.strip()[-150:], want, score))


def check_emitted(ff, tmp, check, lua, text):
    """the emitted program (gcc -std=c99 -Wall -Wextra -Werror, the tokenizer compiled in): generate's ids,
    text and beam search"""
    out = os.path.join(tmp, "marian_emit")
    exe = os.path.join(out, "marian")
    for cmd in ([ff, "emit", lua, "-o", out, "--with-main"],
                ["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-o", exe, exe + ".c", exe + "_main.c",
                 exe + "_kernels.c", "-lm"]):
        p = run(cmd)
        if p.returncode:
            return check("marian emitted", False, "%s: %s" % (cmd[1], p.stderr.strip()[-300:]))
    for flags in (["--max-new", "8"], ["--max-new", "6", "--beam", "3"]):
        common = ["--text", text, "--ids"] + flags
        a = run([exe, "--weights", exe + ".weights"] + common)
        g = run([ff, "generate", lua, "--engine", "runtime"] + common)
        check("marian emitted %s" % " ".join(flags[2:] or ["greedy"]), a.returncode == 0 and a.stdout == g.stdout,
              (a.stdout.strip() if a.stdout == g.stdout else "%r / generate %r %s" % (a.stdout, g.stdout, a.stderr))[:70])


def refusals(ff, tmp, check, cfg, sd, spm_src, spm_tgt, vocab):
    """a broken folder: one line naming the problem, a status in 1..125, no DIR written"""
    cases = [("heads differ", dict(cfg, decoder_attention_heads=4), sd, "decoder_attention_heads"),
             ("pre-LN", dict(cfg, normalize_before=True), sd, "normalize_before"),
             ("separate vocab", dict(cfg, decoder_vocab_size=cfg["vocab_size"] + 1), sd, "decoder_vocab_size"),
             ("no layer", cfg, {k: v for k, v in sd.items() if "decoder.layers.1.fc2.bias" not in k},
              "missing tensor 'model.decoder.layers.1.fc2.bias'"),
             ("copy differs", cfg, dict(sd, **{"model.encoder.embed_tokens.weight": sd["model.shared.weight"] + 1}),
              "differs from the embedding")]
    for name, c, weights, piece in cases:
        folder, out = os.path.join(tmp, "bad_" + name.replace(" ", "_")), os.path.join(tmp, "bad_out")
        write_folder(folder, c, weights, spm_src, spm_tgt, vocab)
        p = run([ff, "import", folder, "-o", out])
        err = p.stderr.strip()
        ok = 1 <= p.returncode <= 125 and len(err.splitlines()) == 1 and piece in err and not os.path.exists(out)
        check("refused: " + name, ok, err[:110])


def write_only(out, de, en):
    """the test's folder, for docs/importing.md's worked path"""
    with tempfile.TemporaryDirectory() as tmp:
        spm_src, sp_src = train_spm(tmp, "source", de, 60)
        spm_tgt, sp_tgt = train_spm(tmp, "target", en, 60)
        vocab = vocab_of(sp_src, sp_tgt)
        cfg = config(len(vocab))
        folder = os.path.join(out, "opus-mt-de-en")
        write_folder(folder, cfg, random_weights(cfg, 11), spm_src, spm_tgt, vocab)
    print(folder)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=False)
    ap.add_argument("--engines", default="runtime,tcc,cc")
    ap.add_argument("--write", metavar="DIR", help="write DIR/opus-mt-de-en (the folder the test imports) and stop")
    args = ap.parse_args()
    check = Check()
    de, en = corpora()
    if args.write:
        return write_only(args.write, de, en)
    with tempfile.TemporaryDirectory() as tmp:
        spm_src, sp_src = train_spm(tmp, "source", de, 60)
        spm_tgt, sp_tgt = train_spm(tmp, "target", en, 60)
        vocab = vocab_of(sp_src, sp_tgt)
        cfg = config(len(vocab))
        sd = random_weights(cfg, 11)
        model = Marian(cfg, sd)
        texts = ["dreihundertzwölf", "zwei und zwanzig tausend", "  Elf  ÄÖ x"]
        engines = args.engines.split(",")
        folder = os.path.join(tmp, "opus-mt-de-en")
        write_folder(folder, cfg, sd, spm_src, spm_tgt, vocab)
        check_model(args.fixformer, tmp, check, "marian", folder, model, sp_src, vocab, texts, engines)
        check_beam(args.fixformer, check, os.path.join(tmp, "marian_out", "marian.lua"), model, sp_src, vocab,
                   texts[:2])
        check_emitted(args.fixformer, tmp, check, os.path.join(tmp, "marian_out", "marian.lua"), texts[1])
        folder = os.path.join(tmp, "opus-mt-copies")
        write_folder(folder, cfg, sd, spm_src, spm_tgt, vocab, copies=True)
        check_model(args.fixformer, tmp, check, "copies", folder, model, sp_src, vocab, texts[:1], engines[:1])
        refusals(args.fixformer, tmp, check, cfg, sd, spm_src, spm_tgt, vocab)
    print("marian: %s" % ("ok" if not check.failures else "%d FAILED" % check.failures))
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
