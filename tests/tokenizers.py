#!/usr/bin/python3
"""Tokenizers against independent implementations, on a generated
multilingual corpus (ASCII, accents, CJK, emoji, whitespace runs, digits,
punctuation):

  gpt2        GPT-2's tokenizer.json built from js-tiktoken's ranks: ids equal
              js-tiktoken's and @huggingface/tokenizers' on every line;
  sp, meta    a SentencePiece-style BPE tokenizer.json (LLaMA's legacy
              Prepend/Replace normalizers; the Metaspace pre-tokenizer),
              trained here: ids and decoded text equal @huggingface/tokenizers';
  wordpiece   a BERT WordPiece tokenizer.json: ids equal @huggingface/tokenizers';
  +added      lines with added tokens (<|endoftext|>, <s>, [CLS], ...) in
              them: ids and text equal @huggingface/tokenizers';
  llama2c     a llama2.c tokenizer.bin written as llama2.c's tokenizer.py
              exports one: ids equal a Python port of run.c's encode;
  round trip  decode(encode(line)) == line for gpt2, sp, meta, llama2c;
  generate    `fixformer generate --text` and `--lines` on a tiny
              decoder-only model with each BPE tokenizer: bos first where the
              format says, the ids of --tokens, the text decoded;
  must fail   malformed tokenizer files: one line, a status in 1..125.

The references run with node from tests/tokenizers (`npm ci` there once;
package-lock.json pins them); without node_modules the test says so and fails.

  tokenizers.py --fixformer BIN --tool TOKENIZE_TOOL
"""
import argparse
import collections
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_DIR = os.path.join(HERE, "tokenizers")
SP = "\u2581"

WORDS = ("the quick brown fox jumps over lazy dog Hello World HTTP JSON don't it's we'll I'm they're "
         "café naïve Ångström Zürich résumé façade São Paulo Crème brûlée Ελληνικά ΟΔΥΣΣΕΥΣ ΣΟΦΙΑ Привет мир "
         "中文 字符 日本語 東京 한국어 안녕하세요 😀 👍🏽 👨‍👩‍👧 🚀 ❤️ "
         "2024 3.14159 007 1,000,000 ! ? ... — «» ( ) \" ' - # @ $ % & * ;: [x] {y} a_b").split()
SEPS = [" ", " ", " ", "  ", "   ", "\t", " \t ", "", ", ", ". "]


def corpus(seed=12, n=240):
    rnd = random.Random(seed)
    lines = ["Hello world", " leading space", "trailing space ", "  two  spaces  ", "tab\tseparated\tvalues",
             "CAPS and lower", "x", " ", "Hello, world! 12 + 30 = 42.", "emoji 😀😀 run", "中文字符和日本語",
             "naïve café — «quoted»", "it's what they're doing'", "   \t  mixed   whitespace\t"]
    for _ in range(n):
        k = rnd.randint(1, 12)
        lines.append("".join(rnd.choice(WORDS) + rnd.choice(SEPS) for _ in range(k)).rstrip("\n"))
    return lines


# added tokens split the text first (compared with @huggingface/tokenizers only: js-tiktoken refuses them)
SPECIAL_LINES = ["Hello <|endoftext|> world", "<s>Hello</s> there <unk>", "[CLS] hello, [SEP] world [MASK]",
                 "a<|endoftext|><|endoftext|>b", "x</s>"]


def node(*args):
    p = subprocess.run(["node", os.path.join(NODE_DIR, "reference.cjs")] + list(args), capture_output=True,
                       text=True, cwd=NODE_DIR)
    if p.returncode:
        raise RuntimeError("node reference.cjs %s: %s" % (args[0], p.stderr.strip()[-500:]))
    return [json.loads(l) for l in p.stdout.splitlines()]


def tool_args(doc):
    """--fixformer and --tool (tokenize_tool), what the tokenizer suites take"""
    ap = argparse.ArgumentParser(description=doc)
    for flag in ("--fixformer", "--tool"):
        ap.add_argument(flag, required=True)
    return ap.parse_args()


def tool(binary, tok, lines_path, size=0):
    p = subprocess.run([binary, tok, lines_path, str(size)], capture_output=True)
    if p.returncode:
        raise RuntimeError("tokenize_tool %s: %s" % (tok, p.stderr.decode().strip()))
    out = p.stdout.decode().split("\n")
    info = dict(kv.split("=") for kv in out[0].split())
    rows = []
    for l in out[1:-1]:
        ids, hexed = l.split("\t")
        rows.append(([int(x) for x in ids.split()], bytes.fromhex(hexed).decode("utf-8", "replace")))
    return info, rows


# ---- a SentencePiece-style BPE, trained trivially on the corpus's Latin words ----

def train_sp(lines, merges_wanted=300):
    words = collections.Counter()
    for l in lines:
        for w in l.replace("\t", " ").split(" "):
            if w and all(ord(c) < 0x250 for c in w):
                words[SP + w] += 1
    alphabet = sorted({c for w in words for c in w})
    vocab = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)] + alphabet
    return vocab, learn_merges(words, vocab, merges_wanted)


def learn_merges(words, vocab, merges_wanted, symbols=list):
    """BPE's training: the most frequent pair of symbols (ties: the larger
    pair) merged, merges_wanted times at most; each new token added to vocab.
    symbols: a word's first symbols (its characters)"""
    seqs = {w: symbols(w) for w in words}
    merges = []
    while len(merges) < merges_wanted:
        pairs = collections.Counter()
        for w, n in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        if a + b not in vocab:
            vocab.append(a + b)
        seqs = {w: merge_pair(s, a, b) for w, s in seqs.items()}
    return merges


def bytes_to_unicode():
    """GPT-2's byte characters: printable bytes stand for themselves, the others for 256, 257, ..."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def merge_pair(s, a, b):
    """the symbols s with each pair a, b (left to right) merged into a + b"""
    out, i = [], 0
    while i < len(s):
        if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(s[i])
            i += 1
    return out


def sp_json(vocab, merges, metaspace):
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(vocab[:3])]
    j = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
         "post_processor": {"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}}],
                            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
         "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                   "vocab": {t: i for i, t in enumerate(vocab)}, "merges": [a + " " + b for a, b in merges]}}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SP}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    if metaspace:  # newer LLaMA/Mistral files: no normalizer, the Metaspace pre-tokenizer
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": SP, "prepend_scheme": "first", "split": False}
    else:  # LLaMA's legacy spelling
        j["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": SP},
                                                               {"type": "Replace", "pattern": {"String": " "},
                                                                "content": SP}]}
        j["pre_tokenizer"] = None
    return j


def wordpiece_json():
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    singles = list("abcdefghijklmnopqrstuvwxyz0123456789") + list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + \
        list("—«»…中文字符日本語東京")
    vocab += singles + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz0123456789"]
    vocab += ("the quick brown fox jumps over lazy dog hello world http json don it we ll they re cafe naive "
              "angstrom zurich resume facade sao paulo creme brulee οδυσσευς σοφια ##ing ##ed ##er ##s ##ll ##re ##fe ##ve "
              "20 ##24 ##14 ##159 000 ##ck ##own").split()
    vocab = list(dict.fromkeys(vocab))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, t in enumerate(vocab[:5])]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                           "strip_accents": None, "lowercase": True},
            "pre_tokenizer": {"type": "BertPreTokenizer"},
            "post_processor": {"type": "TemplateProcessing",
                               "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                          {"Sequence": {"id": "A", "type_id": 0}},
                                          {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                               "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                              "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
            "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                      "max_input_chars_per_word": 100, "vocab": {t: i for i, t in enumerate(vocab)}}}


# ---- llama2.c: its tokenizer.py export, and run.c's encode ported -----------

def write_llama2c(path, vocab, merges):
    rank = {a + b: i for i, (a, b) in enumerate(merges)}
    toks, scores = [], []
    for i, t in enumerate(vocab):
        score = -float(rank[t]) if t in rank else 0.0  # SentencePiece BPE: a merge's score is minus its rank
        t = "\n<s>\n" if i == 1 else "\n</s>\n" if i == 2 else t.replace(SP, " ")
        toks.append(t.encode("utf-8"))
        scores.append(score)
    with open(path, "wb") as f:
        f.write(struct.pack("I", max(len(t) for t in toks)))
        for b, s in zip(toks, scores):
            f.write(struct.pack("fI", s, len(b)))
            f.write(b)
    return toks, [struct.unpack("f", struct.pack("f", s))[0] for s in scores]


def runc_encode(toks, scores, text):
    lookup = {}
    for i, t in enumerate(toks):
        lookup.setdefault(t, i)
    out, buf = [], b""
    data = text.encode("utf-8")
    if data:
        out.append(lookup[b" "])
    for k, c in enumerate(data):
        if c & 0xC0 != 0x80:
            buf = b""
        buf += bytes([c])
        if k + 1 < len(data) and data[k + 1] & 0xC0 == 0x80 and len(buf) < 4:
            continue
        if buf in lookup:
            out.append(lookup[buf])
        else:
            out += [b + 3 for b in buf]
        buf = b""
    while True:
        best, best_id, best_i = -1e10, -1, -1
        for i in range(len(out) - 1):
            j = lookup.get(toks[out[i]] + toks[out[i + 1]], -1)
            if j != -1 and scores[j] > best:
                best, best_id, best_i = scores[j], j, i
        if best_i < 0:
            return out
        out[best_i:best_i + 2] = [best_id]


def compare(name, lines, rows, want_ids, want_text=None, round_trip=False):
    bad = []
    for i, line in enumerate(lines):
        ids, text = rows[i]
        if ids != want_ids[i]:
            bad.append("line %d %r: ids %s, reference %s" % (i, line, ids[:12], want_ids[i][:12]))
        elif want_text is not None and text != want_text[i]:
            bad.append("line %d %r: decoded %r, reference %r" % (i, line, text, want_text[i]))
        elif round_trip and text != line:
            bad.append("line %d %r: decode(encode) = %r" % (i, line, text))
    print("%-10s %s  (%d lines, %d ids)" % (name, "ok" if not bad else "FAIL: " + bad[0], len(lines),
                                           sum(len(r[0]) for r in rows)))
    return bool(bad)


def write_json(path, j):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False)
    return path


def decode_pieces(pieces, ids, bytelevel):
    """the published decoders: GPT-2's byte map; SentencePiece's \u2581,
    <0xXX> and one leading space stripped"""
    if bytelevel:
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs = bs[:] + [256 + n for n in range(256 - len(bs))]
        bs += [b for b in range(256) if b not in bs]
        inv = {chr(c): b for b, c in zip(bs, cs)}
        return bytes(inv[ch] for i in ids for ch in pieces[i])
    out = b""
    for i in ids:
        p = pieces[i]
        out += bytes([int(p[3:5], 16)]) if len(p) == 6 and p.startswith("<0x") else p.replace(SP, " ").encode()
    return out[1:] if out.startswith(b" ") else out


def tiny_model(ff, tmp, name, tok, size, seed):
    """a tiny decoder-only description whose vocabulary is tok, and its random weights: (lua, weights)"""
    lua = os.path.join(tmp, name + ".lua")
    with open(lua, "w") as f:
        f.write('return { name = "%s", arch = "decoder-only", d_model = 16, heads = 2, d_ff = 32, layers = 1,\n'
                '  vocab = %d, positional = "rope", max_seq = 96, norm = "pre", norm_kind = "rmsnorm",\n'
                '  activation = "swiglu", bias = false, final_norm = true, vocabulary = "%s" }\n' % (name, size, tok))
    w = os.path.join(tmp, name + ".safetensors")
    subprocess.run([ff, "init", lua, "-o", w, "--seed", str(seed)], check=True)
    return lua, w


def check_generate(ff, tmp, name, tok, size, bos, prompt_ids, pieces, bytelevel):
    """generate --text: the prompt (bos first where the format says) gives
    what --tokens with the same ids gives, and the text printed is the
    decoding of the generated ids"""
    lua, w = tiny_model(ff, tmp, name, tok, size, 3)
    prompt = ([bos] if bos >= 0 else []) + prompt_ids
    common = ["--weights", w, "--max-new", "6", "--engine", "runtime", "--ids"]
    a = subprocess.run([ff, "generate", lua, "--text", GEN_TEXT] + common, capture_output=True)
    b = subprocess.run([ff, "generate", lua, "--tokens", " ".join(map(str, prompt))] + common, capture_output=True)
    lines = os.path.join(tmp, name + ".lines.txt")
    with open(lines, "w", encoding="utf-8") as f:
        f.write(GEN_TEXT + "\n" + GEN_TEXT + "\n")
    c = subprocess.run([ff, "generate", lua, "--lines", lines] + common, capture_output=True)
    ok = a.returncode == 0 and b.returncode == 0 and a.stdout == b.stdout and b"\t" in a.stdout
    ok = ok and c.returncode == 0 and c.stdout == a.stdout * 2  # --lines: the same, a line each
    if ok:
        ids, text = a.stdout.rstrip(b"\n").split(b"\t")
        ids = [int(x) for x in ids.split()]
        ok = len(ids) == 6 and text == decode_pieces(pieces, [i for i in ids if i not in (0, 1, 2) or bytelevel],
                                                     bytelevel)
    print("%-10s %s  [%s]" % ("gen " + name, "ok" if ok else "FAIL: %s %s" % (a.stderr.decode()[-300:],
                                                                            b.stderr.decode()[-300:]),
                              a.stdout.decode("utf-8", "replace").strip()[:80]))
    return not ok


GEN_TEXT = "Hello café 中文 😀"


MUST_FAIL = [
    # name, file bytes, pieces of the message
    ("bin truncated", lambda g: g["bin"][:len(g["bin"]) // 2], ["truncated in token"]),
    ("bin long token", lambda g: struct.pack("I", 2) + struct.pack("fI", 0.0, 3) + b"abc", ["token 0 has length 3",
                                                                                             "max_token_length = 2"]),
    ("bad JSON", lambda g: b'{"model": {"type": "BPE", ', ["not valid JSON"]),
    ("unknown model", lambda g: json.dumps({"model": {"type": "WordLevel", "vocab": {}}}).encode(),
     ["model.type 'WordLevel' is not supported"]),
    ("merge unknown", lambda g: g["sp_bad_merge"], ["model.merges[0]", "is not in the vocabulary"]),
    ("long token", lambda g: json.dumps({"model": {"type": "BPE", "vocab": {"a" * 2000: 0}, "merges": []}}).encode(),
     ["a token of 2000 bytes, above 1024"]),
    ("vocab size", lambda g: g["gpt2"], ["token id 50256, but the model's vocab is 1000"]),
    ("bin count", lambda g: g["bin"], ["tokenizer.bin: 641 tokens, but the model's vocab is 1000"]),
]


def check_emitted(ff, tmp, name, tok, size, text, label="emitted"):
    """the emitted program of a tiny model whose vocabulary is tok, built with
    gcc -std=c99 -Wall -Wextra -Werror -pedantic and with tcc: its --text
    prints what `fixformer generate --text` prints.  Returns (failed, the driver's C)."""
    lua, w = tiny_model(ff, tmp, name, tok, size, 5)
    out = os.path.join(tmp, name + "_emit")
    exe = os.path.join(out, name)
    common = ["--text", text, "--max-new", "5", "--ids"]
    steps = [[ff, "emit", lua, "--weights", w, "-o", out, "--with-main"],
             ["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o", exe, exe + ".c",
              exe + "_main.c", exe + "_kernels.c", "-lm"],
             ["tcc", "-Wall", "-Werror", "-o", exe + "_tcc", exe + ".c", exe + "_main.c", exe + "_kernels.c", "-lm"]]
    for cmd in steps:
        cmd = [c for c in cmd if not c.endswith("_kernels.c") or os.path.exists(c)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            print("%-10s FAIL: %s: %s" % (label, " ".join(cmd[:2]), p.stderr.strip()[-600:]))
            return True, ""
    a = subprocess.run([exe, "--weights", exe + ".weights"] + common, capture_output=True)
    t = subprocess.run([exe + "_tcc", "--weights", exe + ".weights"] + common, capture_output=True)
    g = subprocess.run([ff, "generate", lua, "--weights", w, "--engine", "runtime"] + common, capture_output=True)
    ok = a.returncode == 0 and a.stdout == g.stdout and t.stdout == g.stdout and b"\t" in a.stdout
    print("%-10s %s  [%s]" % (label, "ok" if ok else "FAIL: %r %r / %r" % (a.stdout, a.stderr[-300:], g.stdout),
                              a.stdout.decode("utf-8", "replace").strip()[:80]))
    with open(exe + "_main.c") as f:
        return not ok, f.read()


def refusal(ff, tmp, path, pieces):
    """generate --text on a tiny model whose vocabulary is path: the problems
    with its refusal (a status in 1..125, one line naming pieces) and stderr"""
    lua = os.path.join(tmp, "bad.lua")
    with open(lua, "w") as f:
        f.write('return { name = "bad", arch = "decoder-only", d_model = 8, heads = 2, d_ff = 16, layers = 1,\n'
                '  vocab = 1000, positional = "rope", max_seq = 16, vocabulary = "%s" }\n' % path)
    w = os.path.join(tmp, "bad.safetensors")
    if not os.path.exists(w):
        subprocess.run([ff, "init", lua, "-o", w], check=True)
    p = subprocess.run([ff, "generate", lua, "--weights", w, "--text", "hi", "--engine", "runtime"],
                       capture_output=True, text=True)
    err = p.stderr.strip()
    problems = [] if 1 <= p.returncode <= 125 else ["exit status %d" % p.returncode]
    problems += [] if len(err.splitlines()) == 1 else ["stderr is not one line"]
    problems += ["message lacks %r" % x for x in pieces if x not in err]
    return problems, err


def must_fail(ff, tmp, files):
    failures = 0
    for name, make, pieces in MUST_FAIL:
        path = os.path.join(tmp, "tokenizer.bin" if name == "bin count" else "bad_" + name.replace(" ", "_"))
        with open(path, "wb") as f:
            f.write(make(files))
        problems, err = refusal(ff, tmp, path, pieces)
        failures += bool(problems)
        print("%-16s %s  [%s]" % (name, "ok" if not problems else "FAIL: " + "; ".join(problems), err[:150]))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules")):
        print("tests/tokenizers/node_modules is missing: run `npm ci` in tests/tokenizers")
        return 1
    lines = corpus()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        lp = os.path.join(tmp, "corpus.txt")
        with open(lp, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        sl = os.path.join(tmp, "special.txt")
        with open(sl, "w", encoding="utf-8") as f:
            f.write("\n".join(SPECIAL_LINES) + "\n")

        def specials(name, path):
            hf = node("hf", path, sl)
            return compare(name + "+added", SPECIAL_LINES, tool(args.tool, path, sl)[1], [r["ids"] for r in hf],
                           [r["text"] for r in hf])
        # GPT-2
        gpt2 = os.path.join(tmp, "gpt2.json")
        node("gpt2-json", gpt2)
        info, rows = tool(args.tool, gpt2, lp, 50257)
        tik = [r["ids"] for r in node("tiktoken", lp)]
        hf = node("hf", gpt2, lp)
        failures += compare("gpt2/tik", lines, rows, tik, round_trip=True)
        failures += compare("gpt2/hf", lines, rows, [r["ids"] for r in hf], [r["text"] for r in hf])
        failures += specials("gpt2", gpt2)
        # SentencePiece-style, both spellings
        vocab, merges = train_sp(lines)
        for name, meta in (("sp", False), ("meta", True)):
            path = write_json(os.path.join(tmp, name + ".json"), sp_json(vocab, merges, meta))
            info, rows = tool(args.tool, path, lp, len(vocab))
            hf = node("hf", path, lp)
            failures += compare(name, lines, rows, [r["ids"] for r in hf], [r["text"] for r in hf], round_trip=not meta)
            failures += specials(name, path)
            failures += info["add_bos"] != "1" or info["bos"] != "1" or info["round_trip"] != ("0" if meta else "1")
            failures += info["tail"] != "-1"
        # WordPiece
        path = write_json(os.path.join(tmp, "wp.json"), wordpiece_json())
        info, rows = tool(args.tool, path, lp)
        hf = node("hf", path, lp)
        failures += (info["add_bos"], info["bos"], info["tail"]) != ("1", "2", "3")  # [CLS] A [SEP]: run --text
        failures += compare("wordpiece", lines, rows, [r["ids"] for r in hf], [r["text"] for r in hf])
        failures += specials("wordpiece", path)
        # llama2.c
        binp = os.path.join(tmp, "tokenizer.bin")
        toks, scores = write_llama2c(binp, vocab, merges)
        info, rows = tool(args.tool, binp, lp, len(vocab))
        failures += compare("llama2c", lines, rows, [runc_encode(toks, scores, l) for l in lines], round_trip=True)
        # generate --text
        sp_path = os.path.join(tmp, "sp.json")
        one = write_lines(tmp)
        failures += check_generate(args.fixformer, tmp, "llama2c", binp, len(vocab), 1,
                                   runc_encode(toks, scores, GEN_TEXT), vocab, False)
        failures += check_generate(args.fixformer, tmp, "sp", sp_path, len(vocab), 1, node("hf", sp_path, one)[0]["ids"],
                                   vocab, False)
        g_vocab = json.load(open(gpt2, encoding="utf-8"))["model"]["vocab"]
        g_pieces = [None] * 50257
        for t, i in g_vocab.items():
            g_pieces[i] = t
        failures += check_generate(args.fixformer, tmp, "gpt2", gpt2, 50257, -1, node("tiktoken", one)[0]["ids"],
                                   g_pieces[:50256] + [""], True)
        # malformed files
        bad = sp_json(vocab, merges, False)
        bad["model"]["merges"] = ["zz" + SP + " q"] + bad["model"]["merges"]
        files = {"bin": open(binp, "rb").read(), "gpt2": open(gpt2, "rb").read(),
                 "sp_bad_merge": json.dumps(bad).encode()}
        failures += must_fail(args.fixformer, tmp, files)
    print("tokenizers: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


def write_lines(tmp):
    p = os.path.join(tmp, "one.txt")
    with open(p, "w", encoding="utf-8") as f:
        f.write(GEN_TEXT + "\n")
    return p


if __name__ == "__main__":
    sys.exit(main())
