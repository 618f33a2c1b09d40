#!/usr/bin/python3
"""PyTorch reference for the shipped demo model "dates" (models/dates.*).

Rebuilds the torch.nn.Transformer model from the three files of the
description (dates.lua, the safetensors it names under `weights`, read by
hand, and the vocabulary under `vocabulary`) and decodes greedily in batches
with padding masks, stopping at <eos>. The dates come from the one generator
that trained the model (models/train_dates.py).

As a module:
    ref = DatesRef("models/dates.lua")
    ref.greedy(["march 5, 1999"])  -> [([token ids ..., eos], "1999-03-05")]
    make_dates(500, 12345)         -> [(input text, expected ISO), ...]

As a command:
    /usr/bin/python3 tests/lib/dates_ref.py --model models/dates.lua \\
        --held-out 500 --seed 12345 --write-dir DIR
writes DIR/inputs.txt (one date text a line), DIR/expected.txt (the ISO
date) and DIR/torch.txt (PyTorch's greedy output: the generated token ids,
<eos> included when it was produced, separated by spaces, a tab, then the
decoded string without special tokens), and prints PyTorch's accuracy.
    /usr/bin/python3 tests/lib/dates_ref.py --model models/dates.lua "Friday, March 5, 1999"
decodes the given texts.
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True   # no __pycache__ in models/
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))

import torch  # noqa: E402

import train_dates  # noqa: E402  (the generator, the model class, the file readers)
from train_dates import make_dates, read_safetensors  # noqa: E402,F401

HELD_OUT_SEED = train_dates.HELD_OUT_SEED


class DatesRef:
    def __init__(self, description, dtype="f32"):
        torch.set_num_threads(2)
        self.model, self.vocab, self.cfg = train_dates.load_model(description)
        if dtype != "f32":  # every matrix (the linear layers, in_proj, the tied embedding) as dtype stores it
            from reference import store_as
            with torch.no_grad():
                for p in self.model.parameters():
                    if p.dim() == 2:
                        p.copy_(torch.from_numpy(store_as(p.detach().numpy(), dtype)))

    @property
    def tokens(self):
        return self.vocab.tokens

    def encode(self, text):
        """Source token ids of a text (lowercased, one character a token)."""
        return self.vocab.encode(text)

    def greedy(self, texts, max_new=16):
        """[(generated ids up to and including <eos>, decoded string)] per text."""
        return train_dates.greedy(self.model, self.vocab, list(texts), max_new=max_new)


def greedy(description, texts, max_new=16):
    return DatesRef(description).greedy(texts, max_new)


def main(argv=None):
    ap = argparse.ArgumentParser(description="PyTorch greedy reference for models/dates.*")
    ap.add_argument("--model", default=os.path.join(HERE, "..", "..", "models", "dates.lua"))
    ap.add_argument("--held-out", type=int, default=0, help="decode this many generated dates")
    ap.add_argument("--seed", type=int, default=HELD_OUT_SEED)
    ap.add_argument("--write-dir", help="write inputs.txt, expected.txt, torch.txt here")
    ap.add_argument("--max-new", type=int, default=16)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "int8"], help="the weight type")
    ap.add_argument("texts", nargs="*", help="date texts to decode")
    args = ap.parse_args(argv)

    ref = DatesRef(args.model, args.dtype)
    for text, (ids, out) in zip(args.texts, ref.greedy(args.texts, args.max_new)):
        print("%s\t%s\t%s" % (text, " ".join(map(str, ref.encode(text))), out))
        print("  generated ids: %s" % " ".join(map(str, ids)))
    if not args.held_out:
        return 0

    pairs = make_dates(args.held_out, args.seed)
    outs = ref.greedy([t for t, _ in pairs], args.max_new)
    right = sum(o == e for (_, e), (_, o) in zip(pairs, outs))
    if args.write_dir:
        os.makedirs(args.write_dir, exist_ok=True)
        with open(os.path.join(args.write_dir, "inputs.txt"), "w") as f:
            f.writelines(t + "\n" for t, _ in pairs)
        with open(os.path.join(args.write_dir, "expected.txt"), "w") as f:
            f.writelines(e + "\n" for _, e in pairs)
        with open(os.path.join(args.write_dir, "torch.txt"), "w") as f:
            f.writelines("%s\t%s\n" % (" ".join(map(str, ids)), out) for ids, out in outs)
    for (t, e), (_, o) in zip(pairs, outs):
        if o != e:
            print("wrong: %r expected %s got %r" % (t, e, o))
    print("torch greedy accuracy: %d/%d = %.2f %% (seed %d)"
          % (right, len(pairs), 100.0 * right / len(pairs), args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
