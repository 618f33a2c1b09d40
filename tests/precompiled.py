#!/usr/bin/python3
"""tokenizer.json's Precompiled normalizer (SentencePiece's rules inside a
tokenizer.json: T5, ALBERT, XLM-R, mBART) as the Rust library applies it:
in grapheme clusters (UAX #29), a cluster of fewer than 6 bytes replaced
whole by the shortest rule that matches its start, else character by
character.  @huggingface/tokenizers approximates Precompiled with NFKC, so
the reference is built here: Python's `regex` module (Debian's
python3-regex) cuts the clusters, the rules are read from the charsmap's
double array, and the normalized text goes through the reference with the
same file less its normalizer; ids and decoded text must be equal.

Two models trained by SentencePiece: nmt_nfkc's rules (the published
models'), and rules of this test's own (1-character keys such as e -> E and
CR -> LF, which make the clusters visible: "e\\u0301" becomes "E" whole,
"\\r\\n" one LF; and "ab" -> X, which no cluster holds).  Two normalizer
shapes, as transformers' converter writes them: [Precompiled, Replace(" {2,}",
" ")] (T5's file) and [Precompiled, Strip(right), Replace(" {2,}", "\\u2581")]
(newer ones).  Lines: the unigram corpus and random strings over the
characters the break rules name (CR LF, controls, marks, ZWJ, emoji and
their modifiers, regional indicators, Hangul L V T LV LVT, Prepend,
SpacingMark).  The emitted program (gcc -pedantic -Werror, tcc) prints what
generate --text prints; linear; a broken charsmap is refused in one line.

  precompiled.py --fixformer BIN --tool TOKENIZE_TOOL
"""
import base64
import copy
import os
import random
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hardening_tokenizers as ht  # noqa: E402  (the CPU-time ratio check)
import tokenizers as tk  # noqa: E402  (the node reference and tokenize_tool helpers)
import tokenizers_split as ts  # noqa: E402  (hex lines)
import unigram as ug  # noqa: E402  (the corpus, training, the Unigram tokenizer.json)

# code points the break rules name
POOL = ["a", "b", "e", "x", " ", "  ", "\r", "\n", "\r\n", "\x07", "\u0301", "\u0323", "\u200d", "\u00a0",
        "\U0001F600", "\U0001F3FD", "\u2764", "\U0001F1E6", "\U0001F1E9", "\u1100", "\u1161", "\u11a8", "\uac00",
        "\uac01", "\u0600", "\u0903", "\u0915", "\u094d", "\uff21", "\ufb01", "e\u0301", "\u00e9", "ab", "\u3000"]
# e -> E, CR -> LF, ab -> X, full-width A -> A, the jamo A -> V, the jamo G (final) -> T, a heart -> H
RULES = "65\t45\nD\tA\n61 62\t58\nFF21\t41\n1161\t56\n11A8\t54\n2764\t48\n"
# clusters each rule of UAX #29 makes, where a rule above shows them (a regional indicator's clusters
# cannot show: any that holds more than one is 6 bytes or more, replaced character by character)
CLUSTERS = ["e\u0301", "\r\n", "\uff21\u0301x", "\u1100\u1161\u0301", "\u1161\u0301", "\uac00\u1161\u0301",
            "\uac01\u11a8\u0301", "\u2764\u200d\u2764\u0301", "\u2764\u0301", "\u0600e\u0301", "e\u0903",
            "\x07\u0301", "a\u200de", "\U0001F1E6\U0001F1E9\U0001F1E6\u0301"]


def charsmap(model_path):
    """the precompiled_charsmap of a .model: ModelProto field 3 (normalizer_spec), its field 2"""
    def fields(b):
        i = 0
        while i < len(b):
            key, i = varint(b, i)
            if key & 7 == 2:
                n, i = varint(b, i)
                yield key >> 3, b[i:i + n]
                i += n
            elif key & 7 == 0:
                _, i = varint(b, i)
            elif key & 7 == 5:
                i += 4
            else:
                i += 8

    def varint(b, i):
        v = s = 0
        while True:
            v |= (b[i] & 127) << s
            s += 7
            i += 1
            if b[i - 1] < 128:
                return v, i
    spec = [v for f, v in fields(open(model_path, "rb").read()) if f == 3][0]
    return [v for f, v in fields(spec) if f == 2][0]


def precompiled(blob, s):
    """the Rust library's Precompiled::normalize of s"""
    import regex
    size = struct.unpack("<I", blob[:4])[0]
    units = struct.unpack("<%dI" % (size // 4), blob[4:4 + size])
    pool = blob[4 + size:]

    def offset(u):
        return (u >> 10) << ((u & (1 << 9)) >> 6)

    def transform(chunk):
        pos = offset(units[0])
        for c in chunk.encode("utf-8"):
            if c == 0:
                return None
            pos ^= c
            if pos >= len(units) or units[pos] & ((1 << 31) | 0xFF) != c:
                return None
            has_leaf = units[pos] >> 8 & 1
            pos ^= offset(units[pos])
            if has_leaf:
                v = units[pos] & ((1 << 31) - 1)
                return pool[v:pool.index(b"\0", v)].decode("utf-8")
        return None
    out = []
    for g in regex.findall(r"\X", s):
        t = transform(g) if len(g.encode("utf-8")) < 6 else None
        if t is not None:
            out.append(t)
            continue
        for c in g:
            t = transform(c)
            out.append(c if t is None else t)
    return "".join(out)


def shapes(blob):
    """the two normalizer Sequences converted files have, and what each does after Precompiled"""
    pre = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(blob).decode()}
    old = {"type": "Sequence", "normalizers": [pre, {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]}
    new = {"type": "Sequence", "normalizers": [pre, {"type": "Strip", "strip_left": False, "strip_right": True},
                                               {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": tk.SP}]}
    import regex
    return [("t5", old, lambda s: regex.sub(" {2,}", " ", s)),
            ("converted", new, lambda s: regex.sub(" {2,}", tk.SP, regex.sub(r"\s+$", "", s)))]


def check(tool, tmp, name, sp, blob, lines):
    failures, paths = 0, {}
    for shape, normalizer, after in shapes(blob):
        j = ug.unigram_json(sp, False)
        bare = tk.write_json(os.path.join(tmp, "%s_%s_bare.json" % (name, shape)), j)
        j = copy.deepcopy(j)
        j["normalizer"] = normalizer
        paths[shape] = path = tk.write_json(os.path.join(tmp, "%s_%s.json" % (name, shape)), j)
        normalized = [after(precompiled(blob, l)) for l in lines]
        ref = tk.node("hf", bare, ts.hex_lines(tmp, "norm", normalized), "hex")
        rows = ts.tool_hex(tool, path, ts.hex_lines(tmp, "raw", lines))
        failures += tk.compare("%s %s" % (name, shape), lines, rows, [r["ids"] for r in ref], [r["text"] for r in ref])
    return failures, paths


def main():
    args = tk.tool_args(__doc__)
    rnd = random.Random(29)
    corpus = ug.corpus()
    lines = corpus[:80] + ug.TRICKY + CLUSTERS + ["x " + c + " y" for c in CLUSTERS] + ["".join(rnd.choice(POOL) for _ in range(rnd.randint(1, 14))) for _ in range(300)]
    lines = [l for l in lines if l.strip()]  # (the reference's Metaspace on empty text differs; tokenizers.py covers it)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "rules.tsv")
        with open(rules, "w") as f:
            f.write(RULES)
        train = corpus + ["".join(rnd.choice(POOL) for _ in range(8)) for _ in range(300)]
        models = [("nfkc",) + ug.train(tmp, "nfkc", train, vocab_size=400, model_type="unigram",
                                       character_coverage=1.0),
                  ("rules",) + ug.train(tmp, "rules", train, vocab_size=400, model_type="unigram",
                                        character_coverage=1.0, normalization_rule_tsv=rules)]
        paths = {}
        for name, model, sp in models:
            failed, more = check(args.tool, tmp, name, sp, charsmap(model), lines)
            failures += failed
            paths[name] = more
        size = models[1][2].get_piece_size()
        failures += tk.check_emitted(args.fixformer, tmp, "pc", paths["rules"]["converted"], size,
                                     "e\u0301 ab \uff21\u0301 x\r\n\U0001F1E6\U0001F1E9 \u1100\u1161\u11a8  y  ")[0]
        short, long_ = ht.words_text(1000, 1), ht.words_text(1000 * ht.SCALE, 2)
        marks = lambda k: ("e" + "\u0301" * k)[:k]  # noqa: E731  (one long cluster)
        failures += ht.linear(args.tool, tmp, "precompiled_text_linear", paths["nfkc"]["t5"], short, long_)
        failures += ht.linear(args.tool, tmp, "precompiled_cluster_linear", paths["rules"]["t5"], marks(1000),
                              marks(1000 * ht.SCALE))
        j = ug.unigram_json(models[0][2], False)
        j["normalizer"] = {"type": "Precompiled", "precompiled_charsmap": base64.b64encode(b"\x08\0\0\0abc").decode()}
        bad = tk.write_json(os.path.join(tmp, "bad_charsmap.json"), j)
        problems, err = tk.refusal(args.fixformer, tmp, bad, ["Precompiled", "charsmap", bad])
        print("%-16s %s  [%s]" % ("bad charsmap", "; ".join(problems) or "ok", err[:150]))
        failures += bool(problems)
    print("precompiled: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
