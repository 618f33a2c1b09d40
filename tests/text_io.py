#!/usr/bin/python3
"""Text in and out with every kind of tokenizer, on the corpus of
tests/tokenizers.py (its lines with added tokens too) and its independent
references (@huggingface/tokenizers and js-tiktoken with node, a port of
llama2.c's run.c, a longest match for the JSON vocabulary):

  tokenize_KIND        `fixformer tokenize --vocabulary F --no-special` prints the
                       references' ids; with a description (MODEL.lua) the
                       template around them (BOS first for llama2.c and LLaMA
                       decoders, [CLS] ... [SEP] for a BERT encoder)
  detokenize_KIND      `fixformer detokenize` of those ids prints the references'
                       text (llama2.c, the vocabulary: the line itself)
  driver_KIND_CC       the `emit --with-main` driver of that model, built with gcc,
                       clang and tcc (-std=c99 -Wall -Wextra -Werror -pedantic):
                       --tokenize and --detokenize print byte for byte what
                       fixformer prints; --lines decodes what `generate --lines
                       --engine runtime` decodes (ids and text); an encoder's
                       --text --output is `run --text` within 1e-5
  c_header             tokenize --c-header: the ids as the header's arrays
  wordpiece_growth     every code point through WordPiece in one text (its
                       normalizer's growth bound holds)
  refusals             one line on stderr and the status: an id outside the
                       vocabulary, a NUL in --lines, a text past max_seq, a
                       malformed command line, --text to a driver without a
                       tokenizer, a tokenizer `emit --with-main` cannot take

  text_io.py --fixformer BIN [--keep DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
import tokenizers as tk  # noqa: E402  (the corpus, references and file writers)
import hardening_tokenizers as ht  # noqa: E402  (a small byte-level BPE)
from tools import need  # noqa: E402

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O1"]
GEN_LINES = [tk.GEN_TEXT, "Hello world", "", "the quick brown fox"]


class Failed(Exception):
    pass


def run(cmd, ok=True, **kw):
    try:
        p = subprocess.run(cmd, capture_output=True, **kw)
    except OSError as e:  # a program that was not built
        raise Failed("%s: %s" % (cmd[0], e))
    if ok and p.returncode:
        raise Failed("%s: exit %d: %s" % (" ".join(map(str, cmd))[:300], p.returncode,
                                         p.stderr.decode("utf-8", "replace").strip()[-400:]))
    return p


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def ids_text(rows):
    return "".join(" ".join(map(str, r)) + "\n" for r in rows).encode()


def describe(tmp, name, tok, size, arch):
    """a tiny model with tok as its vocabulary: a decoder (rope, swiglu), or a BERT-like encoder"""
    lua = os.path.join(tmp, name + ".lua")
    with open(lua, "w") as f:
        if arch == "encoder":
            f.write('return { name = "%s", arch = "encoder", d_model = 16, heads = 2, d_ff = 32, layers = 1,\n'
                    '  vocab = %d, positional = "learned", max_seq = 512, lm_head = false, vocabulary = "%s" }\n'
                    % (name, size, os.path.basename(tok)))
        else:
            f.write('return { name = "%s", arch = "decoder-only", d_model = 16, heads = 2, d_ff = 32, layers = 1,\n'
                    '  vocab = %d, positional = "rope", max_seq = 512, norm = "pre", norm_kind = "rmsnorm",\n'
                    '  activation = "swiglu", bias = false, final_norm = true, vocabulary = "%s" }\n'
                    % (name, size, os.path.basename(tok)))
    return lua


class Suite:
    def __init__(self, ff, tmp):
        self.ff, self.tmp, self.failures, self.t0 = ff, tmp, 0, time.time()

    def check(self, name, fn):
        t = time.time()
        try:
            detail = fn()
            print("%-34s ok    %5.1f s  %s" % (name, time.time() - t, detail or ""))
        except Failed as e:
            self.failures += 1
            print("%-34s FAIL  %5.1f s  %s" % (name, time.time() - t, e))

    def fx(self, *args, ok=True):
        return run([self.ff] + list(args), ok=ok)


# ---- the tokenizers and their references -------------------------------------------------

def tokenizers(tmp, lines, lines_path):
    """[(kind, file, vocab size, arch, reference ids per line, reference text per line or None)]"""
    out = []
    vocab, merges = tk.train_sp(tk.corpus())
    hf = lambda path: tk.node("hf", path, lines_path)  # noqa: E731
    for name, meta in (("sp", False), ("meta", True)):
        path = tk.write_json(os.path.join(tmp, name + ".json"), tk.sp_json(vocab, merges, meta))
        r = hf(path)
        out.append((name, path, len(vocab), "decoder", [x["ids"] for x in r], [x["text"] for x in r]))
    path = tk.write_json(os.path.join(tmp, "bytes.json"), ht.bytelevel_json(vocab, merges, True))
    r = hf(path)
    size = len(json.load(open(path, encoding="utf-8"))["model"]["vocab"])
    out.append(("bytes", path, size, "decoder", [x["ids"] for x in r], [x["text"] for x in r]))
    gpt2 = os.path.join(tmp, "gpt2.json")
    tk.node("gpt2-json", gpt2)
    r = hf(gpt2)
    out.append(("gpt2", gpt2, 50257, "decoder", [x["ids"] for x in r], [x["text"] for x in r]))
    path = tk.write_json(os.path.join(tmp, "wp.json"), tk.wordpiece_json())
    r = hf(path)
    size = len(json.load(open(path, encoding="utf-8"))["model"]["vocab"])
    out.append(("wordpiece", path, size, "encoder", [x["ids"] for x in r], [x["text"] for x in r]))
    binp = os.path.join(tmp, "tokenizer.bin")
    toks, scores = tk.write_llama2c(binp, vocab, merges)
    out.append(("llama2c", binp, len(vocab), "decoder", [tk.runc_encode(toks, scores, l) for l in lines], lines))
    chars = ["<pad>", "<unk>"] + sorted({c for l in lines for c in l.lower() if ord(c) < 0x400})
    path = tk.write_json(os.path.join(tmp, "chars.json"), {"tokens": chars, "pad": 0, "unk": 1, "lowercase": True})
    index = {t: i for i, t in enumerate(chars)}
    low = [l.translate({c: c + 32 for c in range(65, 91)}) for l in lines]
    ref = [[index.get(c, 1) for c in l] for l in low]
    out.append(("vocab", path, len(chars), "decoder", ref, ["".join(c for c in l if c in index) for l in low]))
    return out


def template(kind):
    """(BOS first, tail last) of the model's template, as the kinds' files say"""
    return {"sp": ([1], []), "meta": ([1], []), "llama2c": ([1], []), "wordpiece": ([2], [3])}.get(kind, ([], []))


# ---- the checks ------------------------------------------------------------------------------

def host_checks(s, kind, tok, size, arch, ref, text, lines_path, lua):
    def tokenize():
        got = s.fx("tokenize", "--vocabulary", tok, "--lines", lines_path, "--no-special").stdout
        if got != ids_text(ref):
            raise Failed("--no-special: %r..., reference %r..." % (got[:80], ids_text(ref)[:80]))
        pre, post = template(kind)
        got = s.fx("tokenize", lua, "--lines", lines_path).stdout
        if got != ids_text([pre + r + post for r in ref]):
            raise Failed("with %s: %r..., template + reference %r..." % (os.path.basename(lua), got[:80],
                                                                        ids_text([pre + r + post for r in ref])[:80]))
        return "%d lines, %d ids" % (len(ref), sum(map(len, ref)))

    def detokenize():
        ids = write_lines(os.path.join(s.tmp, kind + ".ids"), [" ".join(map(str, r)) for r in ref])
        got = s.fx("detokenize", "--vocabulary", tok, "--lines", ids).stdout.decode("utf-8", "replace")
        want = "".join(t + "\n" for t in text)
        if got != want:
            bad = [(a, b) for a, b in zip(got.split("\n"), want.split("\n")) if a != b][:1]
            raise Failed("differs from the reference's text: %r" % bad)
        return "%d lines" % len(text)
    s.check("tokenize_" + kind, tokenize)
    s.check("detokenize_" + kind, detokenize)


def driver_checks(s, kind, arch, lines_path, lua, compilers):
    """the emitted driver against fixformer, built by each compiler"""
    out = os.path.join(s.tmp, kind + "_c")
    w = os.path.join(s.tmp, kind + ".safetensors")
    name = os.path.splitext(os.path.basename(lua))[0]
    ids = os.path.join(s.tmp, kind + ".host.ids")
    gen = write_lines(os.path.join(s.tmp, "gen.txt"), GEN_LINES)
    ref = os.path.join(s.tmp, kind + ".run.npy")
    host = {}

    def emit():  # and what fixformer prints, for the drivers to print
        s.fx("init", lua, "-o", w, "--seed", "3")
        s.fx("emit", lua, "-o", out, "--weights", w, "--with-main")
        host["tok"] = s.fx("tokenize", lua, "--lines", lines_path).stdout
        with open(ids, "wb") as f:
            f.write(host["tok"])
        host["detok"] = s.fx("detokenize", lua, "--lines", ids).stdout
        if arch == "decoder":
            host["gen"] = s.fx("generate", lua, "--weights", w, "--lines", gen, "--ids", "--max-new", "4",
                               "--engine", "runtime").stdout
        else:
            s.fx("run", lua, "--weights", w, "--text", tk.GEN_TEXT, "--output", ref, "--engine", "runtime")
        return "%s: %d bytes" % (os.path.basename(lua)[:-4] + "_main.c", os.path.getsize(os.path.join(out, name + "_main.c")))
    s.check("driver_%s_emit" % kind, emit)
    if "detok" not in host:
        return
    host_tok, host_detok, host_gen = host["tok"], host["detok"], host.get("gen")
    for cc in compilers:
        def one(cc=cc):
            exe = os.path.join(out, "%s_%s" % (name, cc))
            t = time.time()
            run([cc] + STRICT + ["-o", exe, os.path.join(out, name + ".c"), os.path.join(out, name + "_main.c"), "-lm"])
            built = time.time() - t
            got = run([exe, "--tokenize", "--lines", lines_path]).stdout
            if got != host_tok:
                raise Failed("--tokenize: %r..., fixformer tokenize %r..." % (got[:80], host_tok[:80]))
            got = run([exe, "--detokenize", "--lines", ids]).stdout
            if got != host_detok:
                raise Failed("--detokenize: %r..., fixformer detokenize %r..." % (got[:80], host_detok[:80]))
            blob = ["--weights", os.path.join(out, name + ".weights")]
            if arch == "decoder":
                got = run([exe] + blob + ["--lines", gen, "--ids", "--max-new", "4"]).stdout
                if got != host_gen:
                    raise Failed("--lines: %r, generate --lines %r" % (got, host_gen))
                shown = got.decode("utf-8", "replace").split("\n")[0]
            else:
                o = os.path.join(out, "text_%s.npy" % cc)
                run([exe] + blob + ["--text", tk.GEN_TEXT, "--output", o])
                a, b = np.load(o), np.load(ref)
                err = float(np.abs(a - b).max() / np.abs(b).max()) if a.shape == b.shape else float("inf")
                if err > 1e-5:
                    raise Failed("--text --output %s against run --text %s: error %.3g" % (a.shape, b.shape, err))
                shown = "--text: %s, error %.2g" % (a.shape, err)
            return "built in %.1f s; %s" % (built, shown)
        s.check("driver_%s_%s" % (kind, cc), one)


def c_header(s, lua_dates):
    def fn():
        texts = write_lines(os.path.join(s.tmp, "dates.txt"), ["March 5, 1999", "12/31/2021"])
        h = os.path.join(s.tmp, "inputs.h")
        s.fx("tokenize", lua_dates, "--lines", texts, "--c-header", "input", "-o", h)
        ids = [[int(x) for x in l.split()] for l in s.fx("tokenize", lua_dates, "--lines", texts).stdout.split(b"\n")[:-1]]
        prog = os.path.join(s.tmp, "h.c")
        with open(prog, "w") as f:
            f.write('#include <stdio.h>\n#include "inputs.h"\nint main(void) {\n'
                    '  for (int i = 0; i < INPUT_COUNT; i++) {\n'
                    '    for (int k = input_start[i]; k < input_start[i + 1]; k++) printf(" %d", (int)input_ids[k]);\n'
                    '    printf(" |");\n'
                    '    for (int t = 0; t < INPUT_T; t++) printf(" %d", (int)input_tokens[i * INPUT_T + t]);\n'
                    '    printf(" | %d\\n", (int)input_lengths[i]);\n  }\n'
                    '  printf("%d %d %d\\n", INPUT_BATCH, INPUT_BOS, INPUT_EOS);\n  return 0;\n}\n')
        exe = os.path.join(s.tmp, "h")
        run(["cc"] + STRICT + ["-I", s.tmp, "-o", exe, prog])
        got = run([exe]).stdout.decode().split("\n")
        T = max(map(len, ids))
        want = ["".join(" %d" % x for x in r) + " |" + "".join(" %d" % x for x in r + [0] * (T - len(r))) +
                " | %d" % len(r) for r in ids] + ["2 1 2", ""]
        if got != want:
            raise Failed("the header's arrays %r, tokenize's ids %r" % (got, want))
        return "%d inputs, T = %d" % (len(ids), T)
    s.check("c_header", fn)


def wordpiece_growth(s, wp):
    """every code point (surrogates, NUL and newlines aside) in one text: the
    normalized text fits the scratch encode reserves for it"""
    def fn():
        cps = [c for c in range(1, 0x110000) if not (0xD800 <= c < 0xE000) and c not in (10, 13)]
        path = os.path.join(s.tmp, "every.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(map(chr, cps)) + "\n")
        got = s.fx("tokenize", "--vocabulary", wp, "--lines", path, "--no-special").stdout
        return "%d code points, %d ids" % (len(cps), len(got.split()))
    s.check("wordpiece_growth", fn)


def refused(s, p, status, pieces):
    err = p.stderr.decode("utf-8", "replace").strip()
    if p.returncode != status or len(err.splitlines()) != 1 or any(x not in err for x in pieces):
        raise Failed("exit %d (want %d), stderr %r, want %r" % (p.returncode, status, err, pieces))
    return err


def refusals(s, lua, exe_dir, name, tok):
    nul = os.path.join(s.tmp, "nul.txt")
    with open(nul, "wb") as f:
        f.write(b"fine\nbad\x00line\n")
    exe = os.path.join(exe_dir, name + "_tcc")
    long_text = " ".join(["hello"] * 600)
    cases = [
        ("refuse_detokenize_id_outside", lambda: s.fx("detokenize", lua, "--tokens", "5 99999", ok=False), 1,
         ["--tokens: id 99999 is outside the vocabulary"]),
        ("refuse_tokenize_nul_in_lines", lambda: s.fx("tokenize", lua, "--lines", nul, ok=False), 1,
         ["nul.txt:2: a NUL byte"]),
        ("refuse_tokenize_past_max_seq", lambda: s.fx("tokenize", lua, "--text", long_text, ok=False), 1,
         ["text: more than 511 tokens"]),
        ("refuse_tokenize_no_input", lambda: s.fx("tokenize", lua, ok=False), 2, ["give one of --text"]),
        ("refuse_tokenize_bad_header_name", lambda: s.fx("tokenize", lua, "--text", "a", "--c-header", "in-put",
                                                          ok=False), 2, ["is not a C identifier"]),
        ("refuse_driver_id_outside", lambda: run([exe, "--detokenize", "--tokens", "5 99999"], ok=False), 1,
         ["--tokens: id 99999 is outside the vocabulary"]),
        ("refuse_driver_nul_in_lines", lambda: run([exe, "--tokenize", "--lines", nul], ok=False), 1,
         ["nul.txt:2: a NUL byte"]),
        ("refuse_driver_past_max_seq", lambda: run([exe, "--tokenize", "--text", long_text], ok=False), 1,
         ["text: more than 511 tokens"]),
    ]
    # a decoder without a tokenizer: its driver takes ids only
    bare = os.path.join(s.tmp, "bare.lua")
    with open(bare, "w") as f:
        f.write('return { name = "bare", arch = "decoder-only", d_model = 16, heads = 2, d_ff = 32, layers = 1,\n'
                '  vocab = 50, positional = "rope", max_seq = 16 }\n')

    def bare_driver():
        d = os.path.join(s.tmp, "bare_c")
        s.fx("emit", bare, "-o", d, "--with-main")
        run(["tcc", "-o", os.path.join(d, "bare"), os.path.join(d, "bare.c"), os.path.join(d, "bare_main.c"), "-lm"])
        return run([os.path.join(d, "bare"), "--weights", "x", "--text", "hello"], ok=False)
    cases.append(("refuse_driver_text_without_tokenizer", bare_driver, 1, ["need a tokenizer"]))
    # a tokenizer.json the host cannot follow (LLaMA 3's Split pre-tokenizer): emit --with-main writes nothing
    split = json.load(open(tok, encoding="utf-8"))
    split["pre_tokenizer"] = {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated"}
    tk.write_json(os.path.join(s.tmp, "split.json"), split)
    sl = os.path.join(s.tmp, "split.lua")
    with open(sl, "w") as f:
        f.write(open(lua).read().replace(os.path.basename(tok), "split.json").replace(name, "split"))
    sd = os.path.join(s.tmp, "split_c")
    cases.append(("refuse_emit_tokenizer_it_cannot_take", lambda: s.fx("emit", sl, "-o", sd, "--with-main", ok=False),
                  1, ["pre_tokenizer 'Split' is not supported"]))
    for cname, fn, status, pieces in cases:
        def one(fn=fn, status=status, pieces=pieces, cname=cname):
            err = refused(s, fn(), status, pieces)
            if cname == "refuse_emit_tokenizer_it_cannot_take" and os.path.exists(sd):
                raise Failed("emit left %s behind" % sd)
            return err[:110]
        s.check(cname, one)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--keep", help="work here and keep it (default: a temporary directory)")
    args = ap.parse_args()
    ff = os.path.abspath(args.fixformer)
    if not os.path.isdir(os.path.join(tk.NODE_DIR, "node_modules")):
        print("tests/tokenizers/node_modules is missing: run `npm ci` in tests/tokenizers")
        return 1
    try:
        need([("gcc", "gcc"), ("clang", "clang"), ("tcc", "tcc"), ("node", "nodejs")])
    except RuntimeError as e:
        print("FAILED: %s" % e)
        return 1
    tmp = args.keep or tempfile.mkdtemp(prefix="text_io_")
    if args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    s = Suite(ff, tmp)
    try:
        lines = tk.corpus() + tk.SPECIAL_LINES
        lines_path = write_lines(os.path.join(tmp, "corpus.txt"), lines)
        kinds = tokenizers(tmp, lines, lines_path)
        print("references: %d tokenizers, %d lines, %.1f s" % (len(kinds), len(lines), time.time() - s.t0))
        for kind, tok, size, arch, ref, text in kinds:
            lua = describe(tmp, "m_" + kind, tok, size, arch)
            host_checks(s, kind, tok, size, arch, ref, text, lines_path, lua)
            # GPT-2's 50257 tokens make a 4.5 MB driver: tcc builds it in a blink, gcc and clang take seconds
            driver_checks(s, kind, arch, lines_path, lua, ["tcc"] if kind == "gpt2" else ["gcc", "clang", "tcc"])
        c_header(s, os.path.join(HERE, "..", "models", "dates.lua"))
        wordpiece_growth(s, [k[1] for k in kinds if k[0] == "wordpiece"][0])
        sp = [k for k in kinds if k[0] == "sp"][0]
        refusals(s, os.path.join(tmp, "m_sp.lua"), os.path.join(tmp, "sp_c"), "m_sp", sp[1])
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("text_io: %s in %.0f s" % ("ok" if not s.failures else "%d FAILED" % s.failures, time.time() - s.t0))
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
