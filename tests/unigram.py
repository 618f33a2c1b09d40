#!/usr/bin/env python3
"""Unigram tokenizers against independent references.

SentencePiece models (.model, Marian's .spm) trained here by the
sentencepiece library (Debian's python3-sentencepiece) on a generated
corpus: nmt_nfkc normalization (its precompiled charsmap), byte fallback,
and the identity normalizer without the dummy prefix or whitespace cleanup.
fixformer's ids equal SentencePiece's encode on every line and its text
equals SentencePiece's decode (where no id is unknown).  tokenizer.json's
Unigram model (Metaspace) against @huggingface/tokenizers
(tests/tokenizers/node_modules), and with byte fallback (which that package
lacks) against SentencePiece on the same pieces.  The emitted program with the model's
tokenizer compiled in (gcc -std=c99 -Wall -Wextra -Werror -pedantic, and
tcc) prints what
`fixformer generate --text` prints.  Encoding is linear in the text (a text
64x longer takes less than hardening_tokenizers' ratio of the time), and
broken or unsupported model files are refused with one line.
"""
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import hardening_tokenizers as ht  # noqa: E402  (the CPU-time ratio check)
import tokenizers as tk  # noqa: E402  (the node reference and tokenize_tool helpers)

SYLLABLES = ("der die das und ist nicht ein zu von mit sich auf für im Haus Hund Katze Straße groß Über Mädchen "
             "schön Bücher Zürich zwei drei vier fünf sieben acht neun zehn elf zwölf hundert tausend ba be bi bo "
             "ka ke ki ko ma me mi mo sa se si so ta te ti to ä ö ü ß").split()
TRICKY = ["der Hund ist schön", "  Zürich   über  alles ", "Ｆｕｌｌ ｗｉｄｔｈ ① ﬁ", "x y z Ω 😀", "a\tb\u00a0c  ",
          "dreihundertzwölf", "ÜBER über Über", "", " ", "q00 007 Ⅻ", "e\u0301 é"]


def corpus(seed=7, n=3000):
    rnd = random.Random(seed)

    def word():
        return "".join(rnd.choice(SYLLABLES) for _ in range(rnd.randint(1, 3)))
    return [" ".join(word() for _ in range(rnd.randint(3, 12))) + rnd.choice(["", ".", ",", "!", " 123", " 4,5"])
            for _ in range(n)]


def train(tmp, name, lines, **kw):
    import sentencepiece as spm
    text = os.path.join(tmp, "corpus.txt")
    if not os.path.exists(text):
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    prefix = os.path.join(tmp, name)
    spm.SentencePieceTrainer.train(input=text, model_prefix=prefix, minloglevel=2, **kw)
    return prefix + ".model", spm.SentencePieceProcessor(model_file=prefix + ".model")


def check_spm(tool, name, path, sp, lines, lp):
    want = [sp.encode(l) for l in lines]
    info, rows = tk.tool(tool, path, lp, sp.get_piece_size())
    unk = sp.unk_id()
    texts = [sp.decode(w) if unk not in w else rows[i][1] for i, w in enumerate(want)]
    bad = info["kind"] != "5" if "kind" in info else False
    return tk.compare(name, lines, rows, want, texts) + bad


def unigram_json(sp, byte_fallback):
    """tokenizer.json's Unigram with SentencePiece's pieces and scores (no normalizer: Metaspace only)"""
    n = sp.get_piece_size()
    vocab = [[sp.id_to_piece(i), sp.get_score(i)] for i in range(n)]
    added = [{"id": i, "content": sp.id_to_piece(i), "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i in range(n) if sp.is_control(i)]
    meta = {"type": "Metaspace", "replacement": tk.SP, "prepend_scheme": "always", "split": True}
    return {"version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": meta,
            "post_processor": None, "decoder": {"type": "Metaspace", "replacement": tk.SP, "prepend_scheme": "always",
                                                "split": True},
            "model": {"type": "Unigram", "unk_id": sp.unk_id(), "vocab": vocab, "byte_fallback": byte_fallback}}


def refusals(ff, tmp, good, bpe):
    """broken and unsupported models: one line naming the problem and the file, a status in 1..125
    (generate --text on a tiny model, as tokenizers.py's refusals), the file unchanged"""
    data = open(good, "rb").read()
    cases = [("truncated", data[:len(data) // 3], "not a SentencePiece model"),
             ("bpe", open(bpe, "rb").read(), "only Unigram models are read"),
             ("bad length", b"\x0a\xff\xff\xff\x0f" + data[5:40], "a length past the end"),
             ("bad piece", b"\x0a\x05\x0a\x03a\x00b", "piece 0 is empty")]
    failures = 0
    for name, blob, piece in cases:
        path = os.path.join(tmp, "bad_%s.model" % name.replace(" ", "_"))
        with open(path, "wb") as f:
            f.write(blob)
        problems, err = tk.refusal(ff, tmp, path, [piece, path])
        problems += [] if open(path, "rb").read() == blob else ["the file changed"]
        failures += bool(problems)
        print("%-16s %s  [%s]" % (name, "; ".join(problems) or "ok", err[:150]))
    return failures


def main():
    args = tk.tool_args(__doc__)
    lines = corpus()
    sample = lines[:60] + TRICKY
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        lp = os.path.join(tmp, "lines.txt")
        with open(lp, "w", encoding="utf-8") as f:
            f.write("\n".join(sample) + "\n")
        nfkc, sp_nfkc = train(tmp, "nfkc", lines, vocab_size=300, model_type="unigram", character_coverage=1.0)
        byte, sp_byte = train(tmp, "bytes", lines, vocab_size=500, model_type="unigram", byte_fallback=True,
                              character_coverage=0.98)
        plain, sp_plain = train(tmp, "plain", lines, vocab_size=300, model_type="unigram",
                                normalization_rule_name="identity", add_dummy_prefix=False,
                                remove_extra_whitespaces=False, character_coverage=1.0)
        bpe, _ = train(tmp, "bpe", lines, vocab_size=300, model_type="bpe")
        failures += check_spm(args.tool, "spm nfkc", nfkc, sp_nfkc, sample, lp)
        failures += check_spm(args.tool, "spm bytes", byte, sp_byte, sample, lp)
        failures += check_spm(args.tool, "spm plain", plain, sp_plain, sample, lp)
        spm_path = os.path.join(tmp, "source.spm")  # Marian's name for the same file
        os.link(nfkc, spm_path)
        failures += check_spm(args.tool, "spm .spm", spm_path, sp_nfkc, sample, lp)
        path = tk.write_json(os.path.join(tmp, "json.json"), unigram_json(sp_nfkc, False))
        hf = tk.node("hf", path, lp)
        failures += tk.compare("json", sample, tk.tool(args.tool, path, lp)[1], [r["ids"] for r in hf],
                               [r["text"] for r in hf])
        # the npm reference has no byte fallback in Unigram: SentencePiece is the reference, its identity
        # normalizer and Metaspace giving the same text
        ident, sp_ident = train(tmp, "ident", lines, vocab_size=500, model_type="unigram", byte_fallback=True,
                                character_coverage=0.98, normalization_rule_name="identity",
                                remove_extra_whitespaces=False)
        # (but for a text that starts with a space: Metaspace adds no "\u2581" before one, SentencePiece does)
        path = tk.write_json(os.path.join(tmp, "json_bytes.json"), unigram_json(sp_ident, True))
        unspaced = [l for l in sample if l[:1] not in (" ", "\t")]
        up = os.path.join(tmp, "unspaced.txt")
        with open(up, "w", encoding="utf-8") as f:
            f.write("\n".join(unspaced) + "\n")
        failures += check_spm(args.tool, "json bytes", path, sp_ident, unspaced, up)
        failures += tk.check_emitted(args.fixformer, tmp, "uni", nfkc, sp_nfkc.get_piece_size(),
                                     "Über  die Straße, ＡＢ 12")[0]
        short, long_ = ht.words_text(1000, 1), ht.words_text(1000 * ht.SCALE, 2)
        word = lambda n, s: ht.words_text(n + n // 4, s, True).replace(" ", "")[:n]  # noqa: E731  (one word)
        failures += ht.linear(args.tool, tmp, "unigram_spm_linear", nfkc, short, long_)
        failures += ht.linear(args.tool, tmp, "unigram_spm_one_long_word_linear", byte, word(1000, 1),
                              word(1000 * ht.SCALE, 2))
        failures += ht.linear(args.tool, tmp, "unigram_json_linear", path, short, long_)
        failures += refusals(args.fixformer, tmp, nfkc, bpe)
    print("unigram: %s" % ("ok" if not failures else "%d FAILED" % failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
