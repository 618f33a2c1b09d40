#!/usr/bin/python3
"""The Split pre-tokenizer and the Unicode normalizers of tokenizer.json
against @huggingface/tokenizers (tests/tokenizers/node_modules), on files
written here in the shapes the hub publishes, over tokenizers.py's
multilingual corpus and lines with digit runs, contractions in several
cases, newlines, CRLF, combining marks and full-width letters (passed as
hex: a line may hold newlines):

  llama3      Sequence [Split(LLaMA-3's pattern, Isolated), ByteLevel(use_regex=false)],
              ignore_merges, a byte-level BPE trained here, and (here, and for o200k)
              the extra lines' short substrings as tokens: a piece found whole is
              one id, so the ids show where the pattern split;
  qwen2       the NFC normalizer and Qwen2's pattern (single digits);
  gpt2 split  GPT-2's pattern as a Split;
  o200k       GPT-4o's pattern (words by letter case, a contraction after a word);
  nfkc lower  Sequence [NFKC, Lowercase] before LLaMA-3's pattern;
  nfkd        NFKD before ByteLevel's own regex;
  bert nfd    BERT uncased as a Sequence [NFD, Lowercase, StripAccents] with WordPiece;
  digits      Sequence [Digits(individual_digits true / false), ByteLevel] (StarCoder's,
              SmolLM's): the reference's ids on the lines whose numbers are ASCII digits
              (its Digits splits on \d, the Rust library on char::is_numeric, \p{N}); on
              every line, the ids of the line's Digits pieces (split here by Unicode
              category N, as Rust does) each encoded by the reference with ByteLevel alone;

ids and decoded text equal the reference's on every line.  NFC, NFD, NFKC
and NFKD of random strings of marks, precomposed, Hangul and compatibility
characters equal Python's unicodedata (the tables' source).  The emitted
programs with the qwen2, the o200k and the digits-each tokenizer compiled in (gcc -Wall -Wextra -Werror
-pedantic, and tcc) prints what `fixformer generate --text` prints.  Split
and the normalizers are linear in the text (hardening_tokenizers' ratio),
and a pattern or behaviour fixformer does not implement is refused in one
line naming it.

  tokenizers_split.py --fixformer BIN --tool TOKENIZE_TOOL
"""
import collections
import copy
import os
import random
import re
import subprocess
import sys
import tempfile
import unicodedata

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hardening_tokenizers as ht  # noqa: E402  (the CPU-time ratio check)
import tokenizers as tk  # noqa: E402  (the corpus, the node reference and tokenize_tool helpers)

# the patterns as the published tokenizer.json files hold them (after JSON decoding)
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
          r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
         r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRA = ["1234567 89 0 12345678901", "a1b22c333d4444e", "٣٤٥٦٧ ١٢ ½Ⅻ ①②③④", "phone: +1-555-0100, ext.42",
         "I'M HE'S they'RE We'Ve you'LL she'D IT'S don'T 'S 's'", "'ll'd 're've", "line one\nline two\n\nthree",
         "crlf\r\nline\r\n\r\nend\r\n", "trailing newline\n", "\n\n  \n\tx", "  spaces\n  and\t\n tabs  ",
         "e\u0301 a\u0308 o\u0302\u0323 \u1e69 q\u0307\u0323 n\u0303", "Ｆｕｌｌ ｗｉｄｔｈ ＡＢＣ １２３", "ﬁ ﬂ ㎏ ™ ² ⁵ ℌ",
         "ΟΔΥΣΣΕΥΣ ΣΟΦΙΑ Σ ἈΘΉΝΑ", "İstanbul ǅ ß ẞ", "한국어 안녕 \u1100\u1161\u11a8", "Ａ\u0301 Å Å",
         "..., !!! ?? )}\n]", "a\u20dd x\u093e\u0903 नमस्ते", "HelloWorld CamelCase iPhone McDONALD'S ABCdef XMLHttpRequest",
         "ǅemal ǄUNGLA ʰeʰLLo ǈʰ ÀÉÎ'll Ａｂｃ x/y//\nz \u0301abc ṡ\u0301A", "中A 日本Go ʰǈ x\u0301Y a!\n//b",
         "x  \n  y", "   ", "\r", "!\r\n\r\nx", "tab\t\t'sx 's9 '\u00e9"]


BYTE = tk.bytes_to_unicode()


def train_bytelevel(lines, merges_wanted=500):
    """a byte-level BPE trained on the corpus's pieces (the split for training
    need not be the tested one): vocabulary and merges"""
    words = collections.Counter()
    for l in lines:
        for w in re.findall(r"'(?:s|t|re|ve|m|ll|d)| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+[\r\n]*|\s+", l):
            words["".join(BYTE[b] for b in w.encode("utf-8"))] += 1
    vocab = [BYTE[b] for b in range(256)]
    return vocab, tk.learn_merges(words, vocab, merges_wanted)


def piece_vocab(vocab, lines, longest=10):
    """vocab and each substring of 2..longest characters of lines: with
    ignore_merges a piece found whole is one id, so the ids show where the
    pattern split (merges alone often agree across a wrong split)"""
    out, seen = list(vocab), set(vocab)
    for l in lines:
        for i in range(len(l)):
            for n in range(2, longest + 1):
                t = "".join(BYTE[b] for b in l[i:i + n].encode("utf-8"))
                if i + n <= len(l) and t not in seen:
                    seen.add(t)
                    out.append(t)
    return out


def bytelevel_json(vocab, merges, specials, pre, normalizer=None, ignore_merges=False):
    size = len(vocab)
    added = [{"id": size + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(specials)]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": normalizer,
            "pre_tokenizer": pre, "post_processor": dict(level, trim_offsets=False), "decoder": level,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": ignore_merges, "vocab": dict({t: i for i, t in enumerate(vocab)},
                                                                    **{t: size + i for i, t in enumerate(specials)}),
                      "merges": [a + " " + b for a, b in merges]}}


def split_pre(pattern, behavior="Isolated", use_regex=False):
    """LLaMA-3's and Qwen2's pre_tokenizer as their files have it"""
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": behavior, "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}]}


def seq(*types):
    return {"type": "Sequence", "normalizers": [{"type": t} for t in types]}


def tokenizers(vocab, merges):
    pieces = piece_vocab(vocab, EXTRA)
    llama3 = bytelevel_json(pieces, merges, ["<|begin_of_text|>", "<|end_of_text|>"], split_pre(LLAMA3),
                            ignore_merges=True)
    qwen2 = bytelevel_json(vocab, merges, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], split_pre(QWEN2),
                           normalizer={"type": "NFC"})
    gpt2 = bytelevel_json(vocab, merges, ["<|endoftext|>"], split_pre(GPT2))
    o200k = bytelevel_json(pieces, merges, ["<|endoftext|>"], split_pre(O200K), ignore_merges=True)
    nfkc = bytelevel_json(vocab, merges, ["<|endoftext|>"], split_pre(LLAMA3), normalizer=seq("NFKC", "Lowercase"))
    nfkd = bytelevel_json(vocab, merges, ["<|endoftext|>"], {"type": "ByteLevel", "add_prefix_space": False,
                                                             "trim_offsets": True, "use_regex": True},
                          normalizer={"type": "NFKD"})
    bert = tk.wordpiece_json()
    bert["normalizer"] = seq("NFD", "Lowercase", "StripAccents")
    return [("llama3", llama3), ("qwen2", qwen2), ("gpt2 split", gpt2), ("o200k", o200k),
            ("nfkc lower", nfkc), ("nfkd", nfkd),
            ("bert nfd", bert)]


def digits_pieces(line, each):
    """the Rust library's Digits: runs of char::is_numeric (\p{N}) and of the rest; each: a number alone"""
    out, i = [], 0
    while i < len(line):
        num, j = unicodedata.category(line[i])[0] == "N", i + 1
        while j < len(line) and not (num and each) and (unicodedata.category(line[j])[0] == "N") == num:
            j += 1
        out.append(line[i:j])
        i = j
    return out


def check_digits(tool, tmp, vocab, merges, lines):
    """Sequence [Digits, ByteLevel] against the reference as the docstring says"""
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    plain = tk.write_json(os.path.join(tmp, "level.json"), bytelevel_json(vocab, merges, ["<|endoftext|>"], level))
    ascii_lines = [l for l in lines if all(unicodedata.category(c)[0] != "N" or c.isascii() for c in l)]
    failures, paths = 0, {}
    for each in (True, False):
        name = "digits %s" % ("each" if each else "runs")
        pre = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": each}, level]}
        paths[each] = path = tk.write_json(os.path.join(tmp, name.replace(" ", "_") + ".json"),
                                           bytelevel_json(vocab, merges, ["<|endoftext|>"], pre))
        ap = hex_lines(tmp, "ascii", ascii_lines)
        ref = tk.node("hf", path, ap, "hex")
        failures += tk.compare(name, ascii_lines, tool_hex(tool, path, ap), [r["ids"] for r in ref],
                               [r["text"] for r in ref])
        split = [digits_pieces(l, each) for l in lines]
        pp = hex_lines(tmp, "pieces", [p for ps in split for p in ps])
        by_piece = iter(tk.node("hf", plain, pp, "hex"))
        want = [[i for _ in ps for i in next(by_piece)["ids"]] for ps in split]
        lp = hex_lines(tmp, "all", lines)
        failures += tk.compare(name + " N", lines, tool_hex(tool, path, lp), want, lines)
    n, words = 1000, lambda k: ("abc def, " * k)[:k]  # noqa: E731  (one Digits piece of many pattern pieces)
    failures += ht.linear(tool, tmp, "digits_runs_text_linear", paths[False], words(n), words(n * ht.SCALE))
    return failures, paths[True], len(vocab) + 1


def hex_lines(tmp, name, lines):
    path = os.path.join(tmp, name + ".hex")
    with open(path, "w") as f:
        f.write("".join(l.encode("utf-8").hex() + "\n" for l in lines))
    return path


def tool_hex(binary, tok, lines_path):
    p = subprocess.run([binary, "--hex", tok, lines_path], capture_output=True)
    if p.returncode:
        raise RuntimeError("tokenize_tool %s: %s" % (tok, p.stderr.decode().strip()))
    rows = []
    for l in p.stdout.decode().split("\n")[1:-1]:
        ids, hexed = l.split("\t")
        rows.append(([int(x) for x in ids.split()], bytes.fromhex(hexed).decode("utf-8", "replace")))
    return rows


# code points where normalization does its work: combining marks of several classes, precomposed
# Latin and Greek, Hangul syllables and jamo, compatibility forms, excluded and singleton compositions
NORM_POOL = [c for a, b in ((0x41, 0x5A), (0x300, 0x36F), (0xC0, 0x17F), (0x1E00, 0x1EFF), (0x1F00, 0x1FFF),
                            (0x1100, 0x1112), (0x1161, 0x1175), (0x11A8, 0x11C2), (0xFB00, 0xFB06), (0xFF01, 0xFF5E),
                            (0x3300, 0x33FF), (0x2460, 0x24FF), (0xA0, 0xBF), (0x958, 0x95F), (0x93C, 0x94D),
                            (0x591, 0x5C7), (0xF900, 0xFAFF), (0x2000, 0x2030), (0x1D15E, 0x1D172))
             for c in range(a, b + 1) if unicodedata.category(chr(c)) != "Cn"] + [0xFDFA, 0xAC00, 0xD7A3, 0x212B, 0x3A3]


def check_forms(tool, tmp):
    """NFC, NFD, NFKC and NFKD of random strings over NORM_POOL (and Hangul syllables) against Python's
    unicodedata (the Unicode version the tables come from): a byte-level tokenizer without merges
    decodes to exactly the normalized text"""
    rnd = random.Random(26)
    marks = [c for c in NORM_POOL if unicodedata.combining(chr(c))]

    def cluster():  # a base (or a Hangul syllable), then up to 3 marks in any order: blocking, reordering
        base = chr(rnd.choice(NORM_POOL) if rnd.random() < 0.85 else rnd.randint(0xAC00, 0xD7A3))
        return base + "".join(chr(rnd.choice(marks)) for _ in range(rnd.choice((0, 1, 1, 2, 3))))
    lines = ["".join(cluster() for _ in range(rnd.randint(1, 8))) for _ in range(400)]
    lp = hex_lines(tmp, "forms", lines)
    failures = 0
    for form in ("NFC", "NFD", "NFKC", "NFKD"):
        j = bytelevel_json([BYTE[b] for b in range(256)], [], [], {"type": "ByteLevel", "add_prefix_space": False,
                                                                   "trim_offsets": True, "use_regex": False},
                           normalizer={"type": form})
        rows = tool_hex(tool, tk.write_json(os.path.join(tmp, form + ".json"), j), lp)
        bad = [(l, r[1]) for l, r in zip(lines, rows) if r[1] != unicodedata.normalize(form, l)]
        print("%-10s %s  (%d random lines against unicodedata %s)" % (
            form.lower(), "ok" if not bad else "FAIL: %r -> %r, reference %r" % (
                bad[0][0], bad[0][1], unicodedata.normalize(form, bad[0][0])), len(lines), unicodedata.unidata_version))
        failures += bool(bad) or len(rows) != len(lines)
    return failures


def check_emitted(ff, tmp, name, tok, size, table):
    """the emitted program's --text (with the Unicode table its tokenizer reads): what generate --text prints"""
    failed, main_c = tk.check_emitted(ff, tmp, name, tok, size, "Cafe\u0301 it'S 12345 <|im_start|>ＦｕｌｌAbC\u212b  x")
    if not failed and table + "[]" not in main_c:
        print("emitted    FAIL: the driver was built without %s" % table)
        return 1
    return int(failed)


def refusals(ff, tmp, base):
    """what fixformer does not implement: one line naming it, a status in 1..125"""
    cases = [("other pattern", split_pre(r"\p{L}+|\p{N}+|\s+|[^\s\p{L}\p{N}]+"), None, [r"\p{L}+|\p{N}+"]),
             ("long normalizer", base["pre_tokenizer"], seq("NFKC", "NFKD", "NFC"), ["NFKD"]),
             ("nfc after bert", None, None, ["BertNormalizer"]),
             ("nfkc after replace", None, {"type": "Sequence", "normalizers": [
                 {"type": "Replace", "pattern": {"String": " "}, "content": tk.SP}, {"type": "NFKC"}]}, ["Replace"])]
    failures = 0
    for name, pre, normalizer, pieces in cases:
        j = copy.deepcopy(base)
        j["pre_tokenizer"], j["normalizer"] = pre, normalizer
        if name == "nfc after bert":
            j = tk.wordpiece_json()
            j["normalizer"] = {"type": "Sequence", "normalizers": [j["normalizer"], {"type": "NFC"}]}
        path = tk.write_json(os.path.join(tmp, "bad_%s.json" % name.replace(" ", "_")), j)
        problems, err = tk.refusal(ff, tmp, path, pieces + [path])
        failures += bool(problems)
        print("%-16s %s  [%s]" % (name, "; ".join(problems) or "ok", err[:160]))
    return failures


def linear_checks(tool, tmp, llama3, qwen2, nfkc, o200k):
    n = 1000
    spaces = lambda k: ("a" + " " * (k - 2) + "b")  # noqa: E731  (one whitespace run: \s+(?!\S))
    crs = lambda k: ("x" + " \r" * (k // 2))[:k]  # noqa: E731  (\s*[\r\n]+ over one run)
    digits = lambda k: ("1234567890" * k)[:k]  # noqa: E731
    marks = lambda k: ("e" + "\u0301\u0316" * k)[:k]  # noqa: E731  (one run of combining marks to reorder)
    cased = lambda k: ("\u01c8\u02b0A\u4e2d" * k)[:k]  # noqa: E731  (one run of U letters, some also W)
    short, long_ = ht.words_text(n, 1), ht.words_text(n * ht.SCALE, 2)
    failures = 0
    for name, tok, s, l in (("split_llama3_text_linear", llama3, short, long_),
                            ("split_llama3_whitespace_run_linear", llama3, spaces(n), spaces(n * ht.SCALE)),
                            ("split_llama3_cr_run_linear", llama3, crs(n), crs(n * ht.SCALE)),
                            ("split_qwen2_digits_linear", qwen2, digits(n), digits(n * ht.SCALE)),
                            ("split_o200k_cased_run_linear", o200k, cased(n), cased(n * ht.SCALE)),
                            ("norm_nfc_marks_linear", qwen2, marks(n), marks(n * ht.SCALE)),
                            ("norm_nfkc_lower_text_linear", nfkc, short, long_)):
        failures += ht.linear(tool, tmp, name, tok, s, l)
    return failures


def main():
    args = tk.tool_args(__doc__)
    lines = tk.corpus() + EXTRA
    specials = ["Hello <|endoftext|> world\n", "<|im_start|>user\nhi<|im_end|>", "<|begin_of_text|>x  y",
                "[CLS] Café [SEP]"]
    vocab, merges = train_bytelevel(lines)
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        lp = hex_lines(tmp, "lines", lines + specials)
        paths, sizes = {}, {}
        for name, j in tokenizers(vocab, merges):
            paths[name] = path = tk.write_json(os.path.join(tmp, name.replace(" ", "_") + ".json"), j)
            sizes[name] = list(j["model"]["vocab"].values())
            ref = tk.node("hf", path, lp, "hex")
            failures += tk.compare(name, lines + specials, tool_hex(args.tool, path, lp), [r["ids"] for r in ref],
                                   [r["text"] for r in ref])
        failures += check_forms(args.tool, tmp)
        failed, digits, size = check_digits(args.tool, tmp, vocab, merges, lines)
        failures += failed + check_emitted(args.fixformer, tmp, "dg", digits, size, "uc_number")
        failures += check_emitted(args.fixformer, tmp, "qw", paths["qwen2"], len(vocab) + 3, "uc_compose")
        failures += check_emitted(args.fixformer, tmp, "o2", paths["o200k"], max(sizes["o200k"]) + 1, "uc_upper")
        failures += linear_checks(args.tool, tmp, paths["llama3"], paths["qwen2"], paths["nfkc lower"], paths["o200k"])
        failures += refusals(args.fixformer, tmp, dict(tokenizers(vocab, merges))["gpt2 split"])
    print("tokenizers_split: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
