#!/usr/bin/env python3
"""tokenizer.json files in the shapes the hub publishes, not only as the
newest library writes them, against @huggingface/tokenizers
(tests/tokenizers/node_modules), on tests/tokenizers.py's multilingual
corpus and lines around added tokens:

  no_type_bpe        a byte-level BPE without model.type (the hub's first
                     GPT-2 and RoBERTa files): inferred as BPE
  no_type_wordpiece  BERT's first file: inferred as WordPiece
  empty_token        an empty string in the vocabulary (Whisper's)
  strip              added tokens with lstrip / rstrip (RoBERTa's <mask>):
                     the whitespace beside them goes with them
  whitespace_only    a text of spaces gives the template's ids alone: run
                     --text and generate --text take it (they refused it)
  template_*         post-processor templates with several special tokens on
                     one side (mBART's $A </s> en_XX, three before the text,
                     BART's <s> $A </s>): `fixformer tokenize --vocabulary`
                     prints the ids Hugging Face's encode gives with them
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hardening_tokenizers as ht  # noqa: E402  (its byte-level BPE builder)
import tokenizers as tk  # noqa: E402  (the node reference, tokenize_tool, the corpus)

STRIP_LINES = ["Hello <mask> world", "a  <mask>b", "x</s>  y", "<mask>", "  <mask>  ", "q <mask>\t\n<mask> z",
               "caf\u00e9 <mask>\u3000\u00e9t\u00e9", "</s></s> </s>", "no tokens here"]


def added(tid, content, lstrip=False, rstrip=False):
    return {"id": tid, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip,
            "normalized": False, "special": True}


def compare_lines(tool, tmp, name, path, lines):
    lp = os.path.join(tmp, name + ".txt")
    with open(lp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    hf = tk.node("hf", path, lp)
    try:
        rows = tk.tool(tool, path, lp)[1]
    except RuntimeError as e:  # refused: the failure this file is about
        print("%-10s FAIL: %s" % (name, str(e)[-160:]))
        return 1
    return tk.compare(name, lines, rows, [r["ids"] for r in hf], [r["text"] for r in hf])


TEMPLATES = {"template_suffix2": (["$A", "</s>", "en_XX"], ["</s>", "en_XX"]),
             "template_prefix3": (["<s>", "en_XX", "<mask>", "$A", "</s>"], ["<s>", "en_XX", "<mask>", "</s>"]),
             "template_bart": (["<s>", "$A", "</s>"], ["<s>", "</s>"])}


def template_json(vocab, merges, single, specials):
    """a byte-level BPE with added tokens and a TemplateProcessing of single"""
    j = ht.bytelevel_json(vocab, merges, True)
    n = len(j["model"]["vocab"])
    ids = {t: n + i for i, t in enumerate(dict.fromkeys(specials + ["<mask>"]))}
    j["model"]["vocab"].update(ids)
    j["added_tokens"] = [added(i, t) for t, i in ids.items()]
    j["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}} if s == "$A" else {"SpecialToken": {"id": s, "type_id": 0}}
                   for s in single],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {t: {"id": t, "ids": [i], "tokens": [t]} for t, i in ids.items()}}
    return j


def templates(ff, tmp, vocab, merges, lines):
    failures = 0
    lp = os.path.join(tmp, "template_lines.txt")
    with open(lp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    for name, (single, specials) in TEMPLATES.items():
        path = tk.write_json(os.path.join(tmp, name + ".json"), template_json(vocab, merges, single, specials))
        want = [r["ids"] for r in tk.node("hf-special", path, lp)]
        p = subprocess.run([ff, "tokenize", "--vocabulary", path, "--lines", lp], capture_output=True, text=True)
        got = [[int(x) for x in l.split()] for l in p.stdout.splitlines()] if p.returncode == 0 else []
        bad = [i for i, (a, b) in enumerate(zip(got, want)) if a != b] if len(got) == len(want) else [-1]
        failures += bool(bad)
        print("%-18s %s  (%d lines)%s" % (name, "FAIL" if bad else "ok", len(lines), " line %d: %s, reference %s" % (
            bad[0], got[bad[0]][:8] if got else p.stderr.strip(), want[bad[0]][:8]) if bad else ""))
        if name == "template_prefix3":
            failures += emitted_template(ff, tmp, path, lp, p.stdout)
    return failures


def emitted_template(ff, tmp, path, lp, want):
    """the emitted driver of an encoder with that tokenizer (gcc -Werror): --tokenize prints what tokenize does"""
    size = len(json.load(open(path, encoding="utf-8"))["model"]["vocab"])
    lua, out = os.path.join(tmp, "tpl.lua"), os.path.join(tmp, "tpl_emit")
    with open(lua, "w") as f:
        f.write('return { name = "tpl", arch = "encoder", d_model = 8, heads = 2, d_ff = 16, layers = 1, vocab = %d, '
                'positional = "learned", max_seq = 512, vocabulary = "%s" }\n' % (size, path))
    exe = os.path.join(out, "tpl")
    for cmd in ([ff, "emit", lua, "-o", out, "--with-main"],
                ["gcc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-o", exe, exe + ".c", exe + "_main.c",
                 exe + "_kernels.c", "-lm"], [exe, "--tokenize", "--lines", lp]):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            break
    ok = p.returncode == 0 and p.stdout == want
    print("%-18s %s  %s" % ("template_emitted", "ok" if ok else "FAIL", (p.stderr.strip() or p.stdout[:60])[-200:]))
    return not ok


def whitespace_only(ff, tmp, wp_path, size):
    """run --text and generate --text of "   " on models with a WordPiece tokenizer: the template's ids"""
    failures = 0
    for arch, cmd, ids in (("encoder", "run", "2 3"), ("decoder-only", "generate", "2")):
        lua = os.path.join(tmp, "ws_%s.lua" % cmd)
        with open(lua, "w") as f:
            f.write('return { name = "ws_%s", arch = "%s", d_model = 16, heads = 2, d_ff = 32, layers = 1, '
                    'vocab = %d, positional = "learned", max_seq = 16, vocabulary = "%s" }\n'
                    % (cmd, arch, size, wp_path))
        w = os.path.join(tmp, "ws_%s.safetensors" % cmd)
        subprocess.run([ff, "init", lua, "-o", w, "--seed", "2"], check=True, capture_output=True)
        extra = ["--output", os.path.join(tmp, "ws_%%s_%s.npy" % cmd)] if cmd == "run" else ["--max-new", "3",
                                                                                              "--ids"]
        outs = []
        for how in (["--text", "   "], ["--tokens", ids]):
            args = [a % how[0][2:] if "%s" in a else a for a in extra]
            p = subprocess.run([ff, cmd, lua, "--weights", w, "--engine", "runtime"] + how + args,
                               capture_output=True)
            outs.append((p.returncode, p.stdout, open(args[1], "rb").read() if cmd == "run" and not p.returncode
                         else b""))
        ok = outs[0][0] == 0 and outs[0] == outs[1]
        failures += not ok
        print("%-18s %s  [%s %s: %r]" % ("whitespace_only", "ok" if ok else "FAIL", cmd, ids, outs[0][:2]))
    return failures


def main():
    args = tk.tool_args(__doc__)
    lines = tk.corpus()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        vocab, merges = tk.train_sp(lines)
        bl = ht.bytelevel_json(vocab, merges, True)
        del bl["model"]["type"]
        bl["model"].update(continuing_subword_prefix=None, end_of_word_suffix=None)
        failures += compare_lines(args.tool, tmp, "no_type_bpe", tk.write_json(os.path.join(tmp, "bpe.json"), bl),
                                  lines)
        wp = tk.wordpiece_json()
        del wp["model"]["type"]
        wp_path = tk.write_json(os.path.join(tmp, "wp.json"), wp)
        failures += compare_lines(args.tool, tmp, "no_type_wordpiece", wp_path, lines)
        empty = ht.bytelevel_json(vocab, merges, True)
        empty["model"]["vocab"][""] = len(empty["model"]["vocab"])
        failures += compare_lines(args.tool, tmp, "empty_token", tk.write_json(os.path.join(tmp, "empty.json"), empty),
                                  lines[:80])
        strip = ht.bytelevel_json(vocab, merges, True)
        n = len(strip["model"]["vocab"])
        strip["added_tokens"] = [added(n, "<mask>", lstrip=True), added(n + 1, "</s>", rstrip=True)]
        strip["model"]["vocab"].update({"<mask>": n, "</s>": n + 1})
        failures += compare_lines(args.tool, tmp, "strip", tk.write_json(os.path.join(tmp, "strip.json"), strip),
                                  STRIP_LINES)
        failures += whitespace_only(args.fixformer, tmp, wp_path, len(wp["model"]["vocab"]))
        failures += templates(args.fixformer, tmp, vocab, merges, lines[:40] + STRIP_LINES)
    print("tokenizers_published: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
