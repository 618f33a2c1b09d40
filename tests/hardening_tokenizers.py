#!/usr/bin/python3
"""Tokenizers on long input and WordPiece's word limit:

  *_linear    each tokenizer (WordPiece, BPE from tokenizer.json in its
              SentencePiece, Metaspace and byte-level forms, llama2.c's
              tokenizer.bin, the JSON vocabulary) encodes and decodes a text
              64 times longer (or one word 64 times longer) in less than
              RATIO times the CPU time of the short one: linear passes near
              64x, quadratic would be 4096x (tokenize_tool --time stops a run
              past the ratio, so a cubic one fails in seconds, not hours);
  vocab_*     the JSON vocabulary's cost per character does not grow with the
              number of tokens (a lookup, not a scan of every token);
  bpe_words_allocate_by_word
              encoding many short words allocates in proportion to the text,
              not a fixed block per word (valgrind's heap total);
  wordpiece_max_chars_*
              max_input_chars_per_word as Hugging Face reads it: absent or
              null 100, any whole number (0: every word unk, 10**9: no limit
              in practice), counted in characters, not bytes; anything else
              refused with one line; the longest-token bound gives the ids of
              the unbounded greedy match.

  hardening_tokenizers.py --fixformer BIN --tool TOKENIZE_TOOL [--valgrind VALGRIND]
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizers as tk  # noqa: E402  (the corpus, trainer and file writers of tests/tokenizers.py)

# linear is ~64x, more with cache misses (n log n for BPE's heap; Unigram's
# lattice of a 64000-character line leaves the caches its 1000-character line
# fits: 221-269x alone on the Zen 5 machine, 378x and once over 512x in CI
# with the suite's other tests on the other core); quadratic is 4096x: 1024
# is 4x below it
RATIO = 1024
SCALE = 64


def words_text(n, seed, letters_only=False):
    rnd = random.Random(seed)
    words = [w for w in tk.WORDS if w.isascii() and (w.isalpha() or not letters_only)]
    out, size = [], 0
    while size < n:
        out.append(rnd.choice(words))
        size += len(out[-1]) + 1
    return " ".join(out)[:n]


def letters_word(n, seed, alphabet="abcdefghijklmnopqrstuvwxyz"):
    rnd = random.Random(seed)
    return "".join(rnd.choice(alphabet) for _ in range(n))


def bytelevel_json(vocab, merges, use_regex):
    """a GPT-2-style byte-level BPE from the SentencePiece-style training:
    each byte's character, the trained tokens with GPT-2's space for U+2581"""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars = [chr(b) for b in bs] + [chr(256 + i) for i in range(256 - len(bs))]
    g = lambda s: s.replace(tk.SP, "\u0120")  # noqa: E731
    toks = list(dict.fromkeys(chars + [g(t) for t in vocab[259:]]))
    return {"version": "1.0", "added_tokens": [], "normalizer": None,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                              "use_regex": use_regex},
            "post_processor": None, "decoder": {"type": "ByteLevel"},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False, "byte_fallback": False,
                      "vocab": {t: i for i, t in enumerate(toks)},
                      "merges": [g(a) + " " + g(b) for a, b in merges]}}


def wordpiece(tmp, name, max_chars="absent"):
    j = tk.wordpiece_json()
    v = j["model"]["vocab"]
    for t in ("\u0436", "##\u0436"):  # a 2-byte letter: the limit counts characters
        v[t] = len(v)
    if max_chars == "absent":
        del j["model"]["max_input_chars_per_word"]
    else:
        j["model"]["max_input_chars_per_word"] = max_chars
    return tk.write_json(os.path.join(tmp, name + ".json"), j), v


def write_lines(tmp, name, lines):
    path = os.path.join(tmp, name + ".txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def timed(tool, tok, tmp, name, lines, ratio):
    """tokenize_tool --time: (CPU seconds a line, ids a line), or an error"""
    p = subprocess.run([tool, "--time", str(ratio), tok, write_lines(tmp, name, lines)], capture_output=True, text=True)
    rows = [l.split() for l in p.stdout.splitlines()[1:]]
    if p.returncode:
        return None, "status %d after %d lines: %s" % (p.returncode, len(rows), p.stderr.strip()[-200:])
    return [(float(r[2]), int(r[1])) for r in rows], None


def check(name, ok, detail):
    print("%-44s %s  [%s]" % (name, "ok" if ok else "FAIL", detail))
    return not ok


def linear(tool, tmp, name, tok, short, long_):
    assert len(long_) >= SCALE * len(short) * 0.99
    got, err = timed(tool, tok, tmp, name, [short, long_], RATIO)
    if err:
        return check(name, False, "%d -> %d chars (limit %dx the time): %s" % (len(short), len(long_), RATIO, err))
    (ts, ns), (tl, nl) = got
    r = tl / ts if ts > 0 else float("inf")
    ok = r < RATIO and ns > 0 and nl >= SCALE * ns / 4
    return check(name, ok, "%d -> %d chars, %d -> %d ids: %.3g -> %.3g ms, %.0fx (limit %dx)" %
                 (len(short), len(long_), ns, nl, ts * 1e3, tl * 1e3, r, RATIO))


def vocab_size(tool, tmp):
    """the same text through a 95-token and a 64x larger character
    vocabulary: the cost must not follow the token count"""
    small = [chr(c) for c in range(32, 127)]
    big = small + [chr(0x4E00 + i) for i in range(len(small) * (SCALE - 1))]
    text = words_text(16000, 5)
    times = []
    for n, toks in (("small", small), ("big", big)):
        path = tk.write_json(os.path.join(tmp, "vocab_%s.json" % n), {"tokens": ["<unk>"] + toks, "unk": 0})
        got, err = timed(tool, path, tmp, "vocab_" + n, [text], RATIO)
        if err:
            return check("vocab_cost_independent_of_its_size", False, err)
        times.append(got[0][0])
    r = times[1] / times[0] if times[0] > 0 else float("inf")
    return check("vocab_cost_independent_of_its_size", r < 8, "%d vs %d tokens: %.3g vs %.3g ms, %.1fx (limit 8x)" %
                 (len(small) + 1, len(big) + 1, times[0] * 1e3, times[1] * 1e3, r))


def heap_bytes(valgrind, tool, tok, lines_path):
    p = subprocess.run([valgrind, "--leak-check=no", tool, tok, lines_path], capture_output=True, text=True)
    m = re.search(r"total heap usage: [\d,]+ allocs, [\d,]+ frees, ([\d,]+) bytes allocated", p.stderr)
    return int(m.group(1).replace(",", "")) if p.returncode == 0 and m else None


def bpe_allocation(valgrind, tool, tmp, tok):
    """2000 short words through byte-level BPE: the bytes allocated beyond an
    empty text's, per byte of text (a fixed 128 KB a word was 26000)"""
    name = "bpe_words_allocate_by_word"
    if not valgrind:
        print("%-44s skipped: no --valgrind (a sanitizer build, or valgrind missing)" % name)
        return 0
    text = " ".join(["the", "quick", "brown", "fox"] * 500)
    base = heap_bytes(valgrind, tool, tok, write_lines(tmp, "empty", [""]))
    used = heap_bytes(valgrind, tool, tok, write_lines(tmp, "w", [text]))
    if base is None or used is None:
        return check(name, False, "valgrind did not run the tool")
    per = (used - base) / len(text)
    return check(name, per < 400, "%d bytes of text: %d bytes allocated, %.0f a byte (limit 400)" %
                 (len(text), used - base, per))


def ids_of(tool, tok, tmp, name, lines):
    p = subprocess.run([tool, tok, write_lines(tmp, name, lines)], capture_output=True, text=True)
    if p.returncode:
        return "status %d: %s" % (p.returncode, p.stderr.strip())
    return [[int(x) for x in l.split("\t")[0].split()] for l in p.stdout.splitlines()[1:]]


def greedy(vocab, word, unk):
    """Hugging Face's WordPiece on one word, as written there: every end from
    the word's, no bound"""
    out, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start and (("##" if start else "") + word[start:end]) not in vocab:
            end -= 1
        if end == start:
            return [unk]
        out.append(vocab[("##" if start else "") + word[start:end]])
        start = end
    return out


def max_chars(tool, tmp):
    failures = 0
    a, zh = "a", "\u0436"
    cases = [  # name, max_input_chars_per_word, lines, what each line becomes: n ids of pieces, or 1 unk
        ("wordpiece_max_chars_default_100", "absent", [a * 100, a * 101], [100, "unk"]),
        ("wordpiece_max_chars_null_100", None, [a * 100, a * 101], [100, "unk"]),
        ("wordpiece_max_chars_zero_every_word_unk", 0, ["a", "ab cd", ","], ["unk", "unk unk", "unk"]),
        ("wordpiece_max_chars_large_no_limit", 10**9, [a * 5000], [5000]),
        ("wordpiece_max_chars_counts_characters", 150, [zh * 150, zh * 151], [150, "unk"]),
    ]
    for name, limit, lines, want in cases:
        tok, vocab = wordpiece(tmp, name, limit)
        got = ids_of(tool, tok, tmp, name, lines)
        unk = vocab["[UNK]"]
        exp = [[unk] * len(w.split()) if isinstance(w, str) else w for w in want]
        ok = not isinstance(got, str) and len(got) == len(exp) and all(
            g == e if isinstance(e, list) else (len(g) == e and unk not in g) for g, e in zip(got, exp))
        shown = got if isinstance(got, str) else [g if len(g) < 4 else "%d ids" % len(g) for g in got]
        failures += check(name, ok, "max %s: %s" % (limit, shown))
    # the bound by the longest token gives what the unbounded search gives
    tok, vocab = wordpiece(tmp, "bounded", 10**9)
    words = [letters_word(400, s, "abcdefghijklmnopqrstuvwxyz" + zh * 3) for s in range(4)] + ["thequickbrownfoxing"]
    got = ids_of(tool, tok, tmp, "bounded", words)
    want = [greedy(vocab, w, vocab["[UNK]"]) for w in words]
    failures += check("wordpiece_bounded_match_equals_unbounded", got == want,
                      "%d words, %s ids" % (len(words), [len(g) for g in got] if not isinstance(got, str) else got))
    return failures


def refused(ff, tmp):
    """a max_input_chars_per_word Hugging Face cannot read: one line, a status in 1..125"""
    failures = 0
    for i, bad in enumerate((-1, 1.5, "100", True)):
        tok, _ = wordpiece(tmp, "bad%d" % i, bad)
        problems, err = tk.refusal(ff, tmp, tok, ["model.max_input_chars_per_word must be a whole number >= 0"])
        failures += check("wordpiece_max_chars_refused %r" % (bad,), not problems, "; ".join(problems + [err[:120]]))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--valgrind", help="valgrind, to count BPE's allocations (not with the sanitizers)")
    args = ap.parse_args()
    tool = args.tool
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        vocab, merges = tk.train_sp(tk.corpus())
        sp = tk.write_json(os.path.join(tmp, "sp.json"), tk.sp_json(vocab, merges, False))
        meta = tk.write_json(os.path.join(tmp, "meta.json"), tk.sp_json(vocab, merges, True))
        bl = tk.write_json(os.path.join(tmp, "bl.json"), bytelevel_json(vocab, merges, True))
        bl_whole = tk.write_json(os.path.join(tmp, "bl_whole.json"), bytelevel_json(vocab, merges, False))
        binp = os.path.join(tmp, "tokenizer.bin")
        tk.write_llama2c(binp, vocab, merges)
        chars = tk.write_json(os.path.join(tmp, "chars.json"),
                              {"tokens": ["<unk>"] + [chr(c) for c in range(32, 127)], "unk": 0})
        wp_unlimited, _ = wordpiece(tmp, "wp_unlimited", 100000)
        wp, _ = wordpiece(tmp, "wp")
        short, long_ = words_text(1000, 1), words_text(1000 * SCALE, 2)
        glued = lambda n, s: words_text(n + n // 4, s, True).replace(" ", "")[:n]  # noqa: E731  (one word, many merges)
        for name, tok, s, l in (
                ("wordpiece_one_long_word_linear", wp_unlimited, letters_word(250, 3), letters_word(250 * SCALE, 4)),
                ("wordpiece_text_linear", wp, short, long_),
                ("bpe_sentencepiece_linear", sp, short, long_),
                ("bpe_metaspace_linear", meta, short, long_),
                ("bpe_bytelevel_one_long_word_linear", bl, glued(1000, 1), glued(1000 * SCALE, 2)),
                ("bpe_bytelevel_text_linear", bl, short, long_),
                ("bpe_bytelevel_no_regex_linear", bl_whole, short, long_),
                ("llama2c_linear", binp, short, long_),
                ("vocab_linear", chars, short, long_)):
            failures += linear(tool, tmp, name, tok, s, l)
        failures += vocab_size(tool, tmp)
        failures += bpe_allocation(args.valgrind, tool, tmp, bl)
        failures += max_chars(tool, tmp)
        failures += refused(args.fixformer, tmp)
    print("hardening_tokenizers: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
