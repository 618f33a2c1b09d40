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
"""
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
    print("tokenizers_published: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
