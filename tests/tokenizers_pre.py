#!/usr/bin/python3
"""Pre-tokenizer Sequences, the Replace and Prepend normalizers and BPE's
end_of_word_suffix of tokenizer.json, on files written here in the shapes
the hub publishes, against @huggingface/tokenizers
(tests/tokenizers/node_modules) over tokenizers_split.py's lines:

  falcon      Sequence [Punctuation(Contiguous), ByteLevel(use_regex), Digits, Split([0-9][0-9][0-9])]
              (Falcon's): on the lines where the reference's Digits (\\d) and the Rust
              library's (char::is_numeric, which after ByteLevel also sees the bytes B2 B3 B9
              BC BD BE as the numbers their characters are) split alike;
  deepseek    Sequence [Split(\\p{N}{1,3}), Split(CJK and kana), Split(its main pattern),
              ByteLevel(use_regex false)] (DeepSeek-V3's), ignore_merges and the lines'
              substrings as tokens (a piece found whole is one id);
  clip        normalizer Sequence [NFC, Replace(\\s+ -> " "), Lowercase], pre-tokenizer Sequence
              [Split(CLIP's pattern, Removed, invert), ByteLevel], BPE with end_of_word_suffix
              "</w>" (CLIP's), decoded as transformers' CLIPTokenizerFast does (the suffix a
              space, the last one stripped);
  replace     Sequence [Replace("ab" -> "X"), Prepend(">"), Replace(\\s+ -> "_"), NFKC] (the
              reference prepends to empty text too, the Rust library does not: no empty line);
  bert steps  WordPiece with Sequence [WhitespaceSplit, Punctuation]: the ids the reference gives
              the same file with BertPreTokenizer (the Rust library defines the two alike; the
              reference's Punctuation keeps runs of marks together);

ids and decoded text equal the reference's.  Then each behavior (Removed,
Isolated, MergedWithPrevious, MergedWithNext, Contiguous) of Punctuation, and
of Split([0-9][0-9][0-9]) inverted or not, before ByteLevel(use_regex false):
each line's pieces made here from the Rust library's NormalizedString::split
(matches and the text between them, then its folds, MergedWithNext's from the
end), each piece encoded by the reference with ByteLevel alone.  The emitted
programs of the deepseek, clip and falcon tokenizers (gcc -Wall -Wextra
-Werror -pedantic, and tcc) print what `fixformer generate --text` prints;
the new steps are linear in the text; what fixformer does not implement is
refused in one line naming it.

  tokenizers_pre.py --fixformer BIN --tool TOKENIZE_TOOL
"""
import collections
import copy
import os
import re
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hardening_tokenizers as ht  # noqa: E402  (the CPU-time ratio check)
import tokenizers as tk  # noqa: E402  (the corpus, the node reference and tokenize_tool helpers)
import tokenizers_split as ts  # noqa: E402  (the extra lines, the byte-level files, hex lines)

# the patterns as the published files hold them (after JSON decoding; DeepSeek's CR and LF are characters)
DS_NUM = r"\p{N}{1,3}"
DS_CJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
DS_MAIN = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
           " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+")
CLIP = r"<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
TRIPLES = "[0-9][0-9][0-9]"
BEHAVIORS = ("Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous")
EXTRA = ["x.y!!z ... (a)-[b] «c» 1,234.5 a--b", "12345678 1234 12 a123b 9999999", "?!", "ab abab aab bba",
         "CLIP  Tokens'll be\tLOWER'D, can't 'S 3x4", "ＦＵＬＬ ﬁ x\u00a0y\u3000z ab", "日本語のテキスト、カタカナ。中文123字符",
         "x\u0301y !!\n\nabc\r\n$100 #tag @user"]
LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}


def split(pattern, behavior="Isolated", invert=False):
    return {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": invert}


def pre_seq(*steps):
    return {"type": "Sequence", "pretokenizers": list(steps)}


def train_clip(lines, merges_wanted=400):
    """a BPE in CLIP's shape: byte characters, each also with "</w>" (a word's last), merges learned
    on the lines' words lowercased (any split will do for training)"""
    byte = tk.bytes_to_unicode()
    words = collections.Counter()
    for l in lines:
        for w in re.findall(r"[^\W\d_]+|\d|[^\s\w]+", unicodedata.normalize("NFC", l).lower()):
            words["".join(byte[b] for b in w.encode("utf-8"))] += 1
    vocab = [byte[b] for b in range(256)] + [byte[b] + "</w>" for b in range(256)]
    return vocab, tk.learn_merges(words, vocab, merges_wanted, symbols=lambda w: list(w[:-1]) + [w[-1] + "</w>"])


def clip_json(vocab, merges):
    j = ts.bytelevel_json(vocab, merges, ["<|startoftext|>", "<|endoftext|>"],
                          pre_seq(split(CLIP, "Removed", True), dict(LEVEL)),
                          normalizer={"type": "Sequence", "normalizers": [
                              {"type": "NFC"}, {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
                              {"type": "Lowercase"}]})
    size = len(vocab)
    j["model"].update(continuing_subword_prefix="", end_of_word_suffix="</w>", unk_token="<|endoftext|>")
    j["post_processor"] = {"type": "RobertaProcessing", "sep": ["<|endoftext|>", size + 1],
                           "cls": ["<|startoftext|>", size], "trim_offsets": False, "add_prefix_space": False}
    return j


def tokenizers(vocab, merges, pieces, clip_vocab, clip_merges):
    falcon = ts.bytelevel_json(vocab, merges, [">>TITLE<<", "<|endoftext|>"], pre_seq(
        {"type": "Punctuation", "behavior": "Contiguous"}, dict(LEVEL),
        {"type": "Digits", "individual_digits": False}, split(TRIPLES)))
    deepseek = ts.bytelevel_json(pieces, merges, ["<｜begin▁of▁sentence｜>", "<|endoftext|>"], pre_seq(
        split(DS_NUM), split(DS_CJK), split(DS_MAIN), dict(LEVEL, use_regex=False)), ignore_merges=True)
    replace = ts.bytelevel_json(vocab, merges, ["<|endoftext|>"], dict(LEVEL), normalizer={
        "type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "ab"}, "content": "X"},
                                            {"type": "Prepend", "prepend": ">"},
                                            {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": "_"},
                                            {"type": "NFKC"}]})
    return [("falcon", falcon), ("deepseek", deepseek), ("clip", clip_json(clip_vocab, clip_merges)),
            ("replace", replace)]


def falcon_agrees(line):
    """the reference's Digits (\\d) splits as the Rust library's here: ASCII numbers only, and no byte
    whose ByteLevel character is a number (B2 B3 B9 BC BD BE: ² ³ ¹ ¼ ½ ¾)"""
    return all(c.isascii() or unicodedata.category(c)[0] != "N" for c in line) and \
        not set(line.encode("utf-8")) & {0xB2, 0xB3, 0xB9, 0xBC, 0xBD, 0xBE}


def hf_split(text, matches, behavior, invert):
    """NormalizedString::split (the Rust library, normalizer.rs): spans, then its folds"""
    spans, gap = [], 0
    for a, b in matches:
        if gap < a:
            spans.append((gap, a, False))
        spans.append((a, b, True))
        gap = b
    if gap < len(text):
        spans.append((gap, len(text), False))
    spans = [(a, b, m != invert) for a, b, m in spans]
    acc, prev = [], False
    if behavior == "Isolated":
        acc = [(a, b) for a, b, _ in spans]
    elif behavior == "Removed":
        acc = [(a, b) for a, b, m in spans if not m]
    elif behavior == "MergedWithNext":  # folded from the end
        for a, b, m in reversed(spans):
            if m and not prev and acc:
                acc[-1] = (a, acc[-1][1])
            else:
                acc.append((a, b))
            prev = m
        acc.reverse()
    else:
        for a, b, m in spans:
            join = (m and not prev) if behavior == "MergedWithPrevious" else m == prev
            if join and acc:
                acc[-1] = (acc[-1][0], b)
            else:
                acc.append((a, b))
            prev = m
    return [text[a:b] for a, b in acc if b > a]


def punct_matches(text):
    """Punctuation: each mark alone (char::is_ascii_punctuation, or \\p{P})"""
    return [(i, i + 1) for i, c in enumerate(text)
            if (c.isascii() and 32 < ord(c) < 127 and not c.isalnum()) or unicodedata.category(c).startswith("P")]


def check_behaviors(tool, tmp, vocab, merges, lines):
    """each behavior against the pieces reference (the docstring's)"""
    plain = tk.write_json(os.path.join(tmp, "plain.json"),
                          ts.bytelevel_json(vocab, merges, ["<|endoftext|>"], dict(LEVEL, use_regex=False)))
    cases = []
    for how in BEHAVIORS:
        cases.append(("punct " + how, {"type": "Punctuation", "behavior": how},
                      lambda l, how=how: hf_split(l, punct_matches(l), how, False)))
        for inv in (False, True):
            cases.append(("%s %s%s" % ("triples", how, " inv" if inv else ""), split(TRIPLES, how, inv),
                          lambda l, how=how, inv=inv: hf_split(l, [m.span() for m in re.finditer(TRIPLES, l)], how, inv)))
    split_lines = [[make(l) for l in lines] for _, _, make in cases]
    pp = ts.hex_lines(tmp, "pieces", [p for sl in split_lines for ps in sl for p in ps])
    by_piece = iter(tk.node("hf", plain, pp, "hex"))
    lp = ts.hex_lines(tmp, "behavior_lines", lines)
    failures, paths = 0, {}
    for (name, step, _), sl in zip(cases, split_lines):
        want = [[i for _ in ps for i in next(by_piece)["ids"]] for ps in sl]
        j = ts.bytelevel_json(vocab, merges, ["<|endoftext|>"], pre_seq(step, dict(LEVEL, use_regex=False)))
        paths[name] = path = tk.write_json(os.path.join(tmp, name.replace(" ", "_") + ".json"), j)
        rows = ts.tool_hex(tool, path, lp)
        texts = ["".join(ps) for ps in sl]  # what is left of the line
        failures += tk.compare(name, lines, rows, want, texts)
    return failures, paths


def check_bert_steps(tool, tmp, lines):
    """Sequence [WhitespaceSplit, Punctuation] as the reference's BertPreTokenizer"""
    j = tk.wordpiece_json()
    bert = tk.write_json(os.path.join(tmp, "bert.json"), j)
    j["pre_tokenizer"] = pre_seq({"type": "WhitespaceSplit"}, {"type": "Punctuation", "behavior": "Isolated"})
    steps = tk.write_json(os.path.join(tmp, "bert_steps.json"), j)
    lp = ts.hex_lines(tmp, "bert_lines", lines)
    ref = tk.node("hf", bert, lp, "hex")
    return tk.compare("bert steps", lines, ts.tool_hex(tool, steps, lp), [r["ids"] for r in ref],
                      [r["text"] for r in ref])


def refusals(ff, tmp, base):
    """what fixformer does not implement: one line naming it, a status in 1..125"""
    def with_pre(pre):
        return lambda j: j.update(pre_tokenizer=pre)
    cases = [("string split", with_pre(pre_seq({"type": "Split", "pattern": {"String": "x"}, "behavior": "Isolated",
                                                "invert": False}, dict(LEVEL))), ["Split", "not a Regex"]),
             ("two bytelevels", with_pre(pre_seq(dict(LEVEL), dict(LEVEL))), ["one ByteLevel"]),
             ("no bytelevel", with_pre(pre_seq(split(TRIPLES), {"type": "Metaspace", "replacement": tk.SP})),
              ["Metaspace"]),
             ("behavior", with_pre(pre_seq(split(TRIPLES, "Merged"), dict(LEVEL))), ["behavior", "Merged"]),
             ("whitespace", with_pre(pre_seq({"type": "Whitespace"}, dict(LEVEL))), ["Whitespace"]),
             ("regex replace", lambda j: j.update(normalizer={"type": "Replace", "pattern": {"Regex": "a+"},
                                                              "content": "b"}), ["Replace", "a+"]),
             ("suffix fallback", lambda j: j["model"].update(end_of_word_suffix="</w>", byte_fallback=True),
              ["end_of_word_suffix", "</w>"]),
             ("prefix", lambda j: j["model"].update(continuing_subword_prefix="##"), ["continuing_subword_prefix"])]
    failures = 0
    for name, change, pieces in cases:
        j = copy.deepcopy(base)
        change(j)
        path = tk.write_json(os.path.join(tmp, "bad_%s.json" % name.replace(" ", "_")), j)
        problems, err = tk.refusal(ff, tmp, path, pieces + [path])
        failures += bool(problems)
        print("%-16s %s  [%s]" % (name, "; ".join(problems) or "ok", err[:160]))
    return failures


def linear_checks(tool, tmp, paths):
    n = 1000
    short, long_ = ht.words_text(n, 1), ht.words_text(n * ht.SCALE, 2)
    marks = lambda k: ("a\u0301" * k)[:k]  # noqa: E731  (one run of DeepSeek's [\p{L}\p{M}]+)
    digits = lambda k: ("1234567890" * k)[:k]  # noqa: E731  (matches next to matches)
    abab = lambda k: ("ab " * k)[:k]  # noqa: E731
    failures = 0
    for name, tok, s, l in (("pre_deepseek_text_linear", paths["deepseek"], short, long_),
                            ("pre_deepseek_marks_linear", paths["deepseek"], marks(n), marks(n * ht.SCALE)),
                            ("pre_falcon_digits_linear", paths["falcon"], digits(n), digits(n * ht.SCALE)),
                            ("pre_clip_text_linear", paths["clip"], short, long_),
                            ("pre_merged_next_linear", paths["triples MergedWithNext"], digits(n),
                             digits(n * ht.SCALE)),
                            ("norm_replace_linear", paths["replace"], abab(n), abab(n * ht.SCALE))):
        failures += ht.linear(tool, tmp, name, tok, s, l)
    return failures


def main():
    args = tk.tool_args(__doc__)
    lines = [l for l in tk.corpus() + ts.EXTRA + EXTRA if l]
    specials = ["Hello <|endoftext|> world\n", "<|startoftext|>a photo of a cat<|endoftext|>"]
    vocab, merges = ts.train_bytelevel(lines)
    pieces = ts.piece_vocab(vocab, EXTRA + ts.EXTRA)
    clip_vocab, clip_merges = train_clip(lines)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        paths, sizes = {}, {}
        for name, j in tokenizers(vocab, merges, pieces, clip_vocab, clip_merges):
            paths[name] = path = tk.write_json(os.path.join(tmp, name + ".json"), j)
            sizes[name] = max(j["model"]["vocab"].values()) + 1
            mine = [l for l in lines if falcon_agrees(l)] if name == "falcon" else lines
            lp = ts.hex_lines(tmp, name, mine + specials)
            ref = tk.node("hf", path, lp, "hex")
            failures += tk.compare(name, mine + specials, ts.tool_hex(args.tool, path, lp), [r["ids"] for r in ref],
                                   [r["text"] for r in ref])
        print("           (falcon: %d of %d lines)" % (sum(map(falcon_agrees, lines)), len(lines)))
        failures += check_bert_steps(args.tool, tmp, lines)
        failed, more = check_behaviors(args.tool, tmp, vocab, merges, lines)
        failures += failed
        paths.update(more)
        text = "Café it'S 12345 日本語のカタカナ ＦｕｌｌAbC!! x\u0301  y $100"
        for name, short, table in (("deepseek", "ds", "uc_symbol"), ("clip", "cl", "uc_compose"),
                                   ("falcon", "fa", "uc_punct")):
            failed, main_c = tk.check_emitted(args.fixformer, tmp, short, paths[name], sizes[name], text, name)
            failures += failed or table + "[]" not in main_c
        failures += linear_checks(args.tool, tmp, paths)
        failures += refusals(args.fixformer, tmp, dict(tokenizers(vocab, merges, pieces, clip_vocab,
                                                                  clip_merges))["replace"])
    print("tokenizers_pre: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
