#!/usr/bin/python3
"""Train fixformer's demo model "dates": human-written dates -> ISO 8601.

A character-level encoder-decoder (torch.nn.Transformer, post-LN, with its
final encoder/decoder norms), one shared embedding for source and target
scaled by sqrt(d_model), sinusoidal positions, output head tied to the
embedding: exactly what fixformer computes for the description this script
writes (docs/model-description.md, "What the runtime computes").

    /usr/bin/python3 models/train_dates.py            # writes models/dates.*

writes, deterministically (fixed seeds, 2 threads, a fixed step count):

    models/dates.lua            the fixformer description
    models/dates.safetensors    float32, nn.Transformer state-dict names + embed.weight
    models/dates.vocab.json     the character vocabulary

then reloads the written files, decodes 500 held-out dates greedily and exits
1 if fewer than 99 % come out exactly right (it also reports 5000 more).

The defaults (d_model 64, 4 heads, d_ff 128, 2 + 2 layers, 170,304
parameters; AdamW, lr 2e-3 with 300 warm-up steps and a cosine decay, batch
64, 4000 steps) take about 14 minutes on the project's 2-core machine, whose
Debian PyTorch multiplies with the reference BLAS (about 3 GFLOP/s): most of
the time is matrix products, hence batches of similar source length.

Inputs (lowercase; the model's users lowercase before tokenizing), for every
date of 1900-01-01 .. 2099-12-31:
    march 5, 1999      mar 5, 1999       sept 5, 1999
    5 march 1999       5 mar 1999
    friday, march 5, 1999   fri, march 5, 1999   fri, mar 5, 1999
    march 5th 1999     march 5th, 1999
    5th of march, 1999 5th of march 1999
    5.3.1999  05.03.1999 (day.month.year)
    03/05/1999  3/5/1999 (month/day/year)
    1999-03-05
Output: 1999-03-05.

The held-out set (make_dates(n, HELD_OUT_SEED)) uses other dates than
training: every calendar date among the first HELD_OUT_RESERVED held-out
samples is left out of training altogether, in every format.
"""
import argparse
import datetime
import json
import math
import os
import random
import struct
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # --write-data needs no PyTorch
    torch = nn = F = None

# ---- the data generator (the one generator: tests/lib/dates_ref.py imports it) --

MONTHS = ["january", "february", "march", "april", "may", "june", "july",
          "august", "september", "october", "november", "december"]
MONTH_ABBR = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep",
              "oct", "nov", "dec"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday",
            "saturday", "sunday"]                     # date.weekday() order
WEEKDAY_ABBR = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]

FIRST_DAY = datetime.date(1900, 1, 1).toordinal()
LAST_DAY = datetime.date(2099, 12, 31).toordinal()

HELD_OUT_SEED = 12345       # the held-out sample the tests use
HELD_OUT_RESERVED = 2000    # its first this-many samples' dates never train
TRAIN_SEED = 1              # the training stream (a different seed)
MONITOR_SEED = 777          # progress reports while training

SPECIALS = ["<pad>", "<bos>", "<eos>", "<unk>"]
PAD, BOS, EOS, UNK = 0, 1, 2, 3
TARGET_LEN = 10             # YYYY-MM-DD


def ordinal_suffix(d):
    if 10 <= d % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th")


def month_abbr(m, rng):
    if m == 9 and rng.random() < 0.5:
        return "sept"
    return MONTH_ABBR[m - 1]


def fmt_mdy_full(dt, rng):      # march 5, 1999
    return "%s %d, %d" % (MONTHS[dt.month - 1], dt.day, dt.year)


def fmt_mdy_abbr(dt, rng):      # mar 5, 1999
    return "%s %d, %d" % (month_abbr(dt.month, rng), dt.day, dt.year)


def fmt_dmy_full(dt, rng):      # 5 march 1999
    return "%d %s %d" % (dt.day, MONTHS[dt.month - 1], dt.year)


def fmt_dmy_abbr(dt, rng):      # 5 mar 1999
    return "%d %s %d" % (dt.day, month_abbr(dt.month, rng), dt.year)


def fmt_weekday(dt, rng):       # friday, march 5, 1999 / fri, march 5, 1999 / fri, mar 5, 1999
    wd = dt.weekday()
    wname = WEEKDAYS[wd] if rng.random() < 0.5 else WEEKDAY_ABBR[wd]
    mname = MONTHS[dt.month - 1] if rng.random() < 0.75 else month_abbr(dt.month, rng)
    return "%s, %s %d, %d" % (wname, mname, dt.day, dt.year)


def fmt_ordinal(dt, rng):       # march 5th 1999 / march 5th, 1999
    comma = "," if rng.random() < 0.3 else ""
    return "%s %d%s%s %d" % (MONTHS[dt.month - 1], dt.day, ordinal_suffix(dt.day), comma, dt.year)


def fmt_of(dt, rng):            # 5th of march, 1999 / 5th of march 1999
    comma = "," if rng.random() < 0.7 else ""
    return "%d%s of %s%s %d" % (dt.day, ordinal_suffix(dt.day), MONTHS[dt.month - 1], comma, dt.year)


def fmt_dots(dt, rng):          # 5.3.1999 / 05.03.1999 (day.month.year)
    if rng.random() < 0.5:
        return "%d.%d.%d" % (dt.day, dt.month, dt.year)
    return "%02d.%02d.%d" % (dt.day, dt.month, dt.year)


def fmt_slash(dt, rng):         # 03/05/1999 / 3/5/1999 (month/day/year)
    if rng.random() < 0.5:
        return "%02d/%02d/%d" % (dt.month, dt.day, dt.year)
    return "%d/%d/%d" % (dt.month, dt.day, dt.year)


def fmt_iso(dt, rng):           # 1999-03-05
    return dt.isoformat()


# the weekday format, the longest and the one whose date moves furthest with
# the variable-length prefix, is drawn twice as often as the others
FORMATS = [fmt_mdy_full, fmt_mdy_abbr, fmt_dmy_full, fmt_dmy_abbr, fmt_weekday, fmt_weekday,
           fmt_ordinal, fmt_of, fmt_dots, fmt_slash, fmt_iso]


def random_date(rng):
    return datetime.date.fromordinal(rng.randint(FIRST_DAY, LAST_DAY))


def sample(rng):
    """One (text, iso, format name) triple from rng."""
    dt = random_date(rng)
    f = FORMATS[rng.randrange(len(FORMATS))]
    return f(dt, rng).lower(), dt.isoformat(), f.__name__[4:]


def make_dates(n, seed):
    """n (input text, expected ISO) pairs; the first k of make_dates(n, s)
    are make_dates(k, s)."""
    rng = random.Random(seed)
    return [sample(rng)[:2] for _ in range(n)]


def make_dates_with_format(n, seed):
    rng = random.Random(seed)
    return [sample(rng) for _ in range(n)]


def reserved_dates():
    """ISO dates that never appear in training (those of the held-out set)."""
    return {iso for _, iso in make_dates(HELD_OUT_RESERVED, HELD_OUT_SEED)}


def training_stream(seed, exclude):
    rng = random.Random(seed)
    while True:
        text, iso, _ = sample(rng)
        if iso not in exclude:
            yield text, iso


def training_batches(stream, batch, rng, pool=16):
    """Batches of similar source length (less padding, half the encoder's
    work on this machine's reference BLAS), in a shuffled order."""
    while True:
        items = sorted((next(stream) for _ in range(batch * pool)), key=lambda x: len(x[0]))
        chunks = [items[i: i + batch] for i in range(0, len(items), batch)]
        rng.shuffle(chunks)
        yield from chunks


# ---- vocabulary -------------------------------------------------------------

def vocabulary_tokens():
    chars = set("0123456789-./, ")
    for w in MONTHS + MONTH_ABBR + WEEKDAYS + WEEKDAY_ABBR + ["sept", "st", "nd", "rd", "th", "of"]:
        chars.update(w)
    rest = sorted(chars - {" ", ","})
    return SPECIALS + [" ", ","] + rest


def vocabulary_json(tokens):
    return {"tokens": tokens, "pad": PAD, "bos": BOS, "eos": EOS, "unk": UNK, "lowercase": True}


class Vocab:
    def __init__(self, tokens):
        self.tokens = list(tokens)
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def encode(self, text):
        return [self.index.get(c, UNK) for c in text.lower()]

    def decode(self, ids):
        return "".join(self.tokens[i] for i in ids if i >= len(SPECIALS))

    @staticmethod
    def load(path):
        with open(path) as f:
            v = json.load(f)
        assert (v["pad"], v["bos"], v["eos"], v["unk"]) == (PAD, BOS, EOS, UNK), path
        return Vocab(v["tokens"])


def encode_batch(vocab, texts):
    """Right-padded source ids [B,S] and the key padding mask [B,S] (True = pad)."""
    ids = [vocab.encode(t) for t in texts]
    S = max(len(x) for x in ids)
    src = torch.full((len(ids), S), PAD, dtype=torch.long)
    for i, x in enumerate(ids):
        src[i, :len(x)] = torch.tensor(x, dtype=torch.long)
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.long)
    pad_mask = torch.arange(S)[None, :] >= lengths[:, None]
    return src, pad_mask


def encode_targets(vocab, isos):
    body = torch.tensor([vocab.encode(s) for s in isos], dtype=torch.long)
    bos = torch.full((len(isos), 1), BOS, dtype=torch.long)
    eos = torch.full((len(isos), 1), EOS, dtype=torch.long)
    return torch.cat([bos, body], 1), torch.cat([body, eos], 1)


# ---- the model --------------------------------------------------------------

def sinusoidal_table(T, d):
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...): float64 -> float32."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    i2 = torch.arange(0, d, 2, dtype=torch.float64)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), i2 / d)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d // 2])
    return pe.float()


class DateModel(nn.Module if nn else object):
    """nn.Transformer with a shared, scaled, tied embedding and sinusoidal positions."""

    def __init__(self, vocab, d_model, heads, d_ff, encoder_layers, decoder_layers,
                 dropout=0.0, max_seq=48):
        super().__init__()
        self.d_model = d_model
        self.transformer = nn.Transformer(d_model, heads, encoder_layers, decoder_layers, d_ff,
                                          dropout=dropout, activation="relu", batch_first=True,
                                          norm_first=False)
        # the nested-tensor fast path of 1.13 zeroes padded rows and may
        # shorten the memory (shared/DESIGN.md, "Pitfalls"): keep the plain path
        self.transformer.encoder.enable_nested_tensor = False
        self.embed = nn.Embedding(vocab, d_model)
        # scaled by sqrt(d) in forward, so start at unit variance after scaling
        nn.init.normal_(self.embed.weight, 0.0, d_model ** -0.5)
        self.drop = nn.Dropout(dropout)
        self.register_buffer("pe", sinusoidal_table(max_seq, d_model), persistent=False)

    def embed_tokens(self, ids):
        x = self.embed(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]]
        return self.drop(x)

    def encode(self, src, src_pad):
        return self.transformer.encoder(self.embed_tokens(src), src_key_padding_mask=src_pad)

    def decode(self, tgt, memory, src_pad):
        T = tgt.shape[1]
        causal = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        h = self.transformer.decoder(self.embed_tokens(tgt), memory, tgt_mask=causal,
                                     memory_key_padding_mask=src_pad)
        return h @ self.embed.weight.t()

    def forward(self, src, src_pad, tgt):
        return self.decode(tgt, self.encode(src, src_pad), src_pad)

    def export_tensors(self):
        """name -> float32 tensor, with fixformer's (PyTorch's) names."""
        out = {k: v.detach().float().contiguous() for k, v in self.transformer.state_dict().items()}
        out["embed.weight"] = self.embed.weight.detach().float().contiguous()
        return out

    def import_tensors(self, tensors):
        tensors = dict(tensors)
        self.embed.weight.data.copy_(tensors.pop("embed.weight"))
        self.transformer.load_state_dict(tensors, strict=True)


@torch.no_grad()
def greedy(model, vocab, texts, max_new=16, batch=256):
    """Greedy decoding: per text, (generated ids up to and including <eos>, decoded string)."""
    model.eval()
    results = []
    for b in range(0, len(texts), batch):
        chunk = texts[b: b + batch]
        src, pad = encode_batch(vocab, chunk)
        memory = model.encode(src, pad)
        tgt = torch.full((len(chunk), 1), BOS, dtype=torch.long)
        done = torch.zeros(len(chunk), dtype=torch.bool)
        for _ in range(max_new):
            logits = model.decode(tgt, memory, pad)
            nxt = logits[:, -1].argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, PAD), nxt)
            tgt = torch.cat([tgt, nxt[:, None]], 1)
            done |= nxt == EOS
            if bool(done.all()):
                break
        for row in tgt[:, 1:].tolist():
            ids = []
            for t in row:
                if t == PAD:
                    break
                ids.append(t)
                if t == EOS:
                    break
            body = ids[:-1] if ids and ids[-1] == EOS else ids
            results.append((ids, vocab.decode(body)))
    return results


# ---- files ------------------------------------------------------------------

def write_safetensors(path, tensors):
    """float32 little-endian, tensors in sorted name order: byte-for-byte reproducible."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.float32).contiguous()
        data = struct.pack("<%df" % t.numel(), *t.flatten().tolist())
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    """name -> float32 tensor (F32 only), read by hand."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n].decode())
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            raise ValueError("%s: %s: dtype %s, expected F32" % (path, name, info["dtype"]))
        begin, end = info["data_offsets"]
        count = (end - begin) // 4
        vals = struct.unpack("<%df" % count, raw[base + begin: base + end])
        out[name] = torch.tensor(vals, dtype=torch.float32).reshape(info["shape"])
    return out


LUA_TEMPLATE = """\
-- dates: human-written dates -> ISO 8601 (YYYY-MM-DD), a character-level
-- encoder-decoder trained by models/train_dates.py (nn.Transformer: post-LN
-- with final norms, sinusoidal positions, one shared embedding scaled by
-- sqrt(d_model) and tied to the output head). Lowercase the input, tokenize
-- it one character a token with dates.vocab.json, decode greedily from <bos>
-- until <eos>: "friday, march 5, 1999" -> "1999-03-05".
return {
  name             = "dates",
  arch             = "encoder-decoder",
  d_model          = %(d_model)d,
  heads            = %(heads)d,
  d_ff             = %(d_ff)d,
  encoder_layers   = %(encoder_layers)d,
  decoder_layers   = %(decoder_layers)d,
  norm             = "post",
  final_norm       = true,
  activation       = "relu",
  vocab            = %(vocab)d,
  positional       = "sinusoidal",
  scale_embeddings = true,
  tie_embeddings   = true,
  max_seq          = %(max_seq)d,
  weights          = "dates.safetensors",   -- relative to this file
  vocabulary       = "dates.vocab.json",    -- relative to this file
}
"""


def parse_description(path):
    """The flat key = value pairs of a description like the one written above."""
    import re
    cfg = {}
    with open(path) as f:
        for line in f:
            line = line.split("--", 1)[0]
            m = re.match(r"\s*(\w+)\s*=\s*(.+?)\s*,?\s*$", line)
            if not m or m.group(1) == "return":
                continue
            k, v = m.group(1), m.group(2).rstrip(",").strip()
            if v.startswith('"'):
                cfg[k] = v.strip('"')
            elif v in ("true", "false"):
                cfg[k] = v == "true"
            else:
                try:
                    cfg[k] = int(v)
                except ValueError:
                    cfg[k] = float(v)
    return cfg


def load_model(description):
    """(model in eval mode, vocab, cfg) from a description written by this script."""
    cfg = parse_description(description)
    here = os.path.dirname(os.path.abspath(description))
    vocab = Vocab.load(os.path.join(here, cfg["vocabulary"]))
    assert len(vocab.tokens) == cfg["vocab"], "vocab size mismatch"
    model = DateModel(cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["d_ff"],
                      cfg["encoder_layers"], cfg["decoder_layers"], 0.0, cfg["max_seq"])
    model.import_tensors(read_safetensors(os.path.join(here, cfg["weights"])))
    model.eval()
    return model, vocab, cfg


def accuracy(model, vocab, pairs):
    outs = greedy(model, vocab, [t for t, _ in pairs])
    wrong = [(t, e, o[1]) for (t, e), o in zip(pairs, outs) if o[1] != e]
    return 1.0 - len(wrong) / len(pairs), wrong


# ---- the data as files, for `fixformer train` ---------------------------------

def write_data(folder, n_train, n_held_out):
    """folder/train.tsv: the training stream's first n_train pairs (source<TAB>ISO, a line each);
    folder/heldout.tsv: the first n_held_out held-out pairs, whose dates never train."""
    os.makedirs(folder, exist_ok=True)
    stream = training_stream(TRAIN_SEED, reserved_dates())
    with open(os.path.join(folder, "train.tsv"), "w") as f:
        for _ in range(n_train):
            f.write("%s\t%s\n" % next(stream))
    with open(os.path.join(folder, "heldout.tsv"), "w") as f:
        f.writelines("%s\t%s\n" % p for p in make_dates(n_held_out, HELD_OUT_SEED))
    print("wrote %s (%d pairs) and %s (%d pairs)" % (os.path.join(folder, "train.tsv"), n_train,
                                                     os.path.join(folder, "heldout.tsv"), n_held_out))
    return 0


# ---- training ---------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)),
                    help="directory for dates.lua/.safetensors/.vocab.json (default: models/)")
    ap.add_argument("--steps", type=int, default=4000, help="optimizer steps (default 4000)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="time budget for training: the step count is cut to fit, estimated "
                         "from the first 50 steps (makes the result depend on the machine)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=128)
    ap.add_argument("--encoder-layers", type=int, default=2)
    ap.add_argument("--decoder-layers", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--max-seq", type=int, default=48)
    ap.add_argument("--seed", type=int, default=0, help="torch seed")
    ap.add_argument("--held-out", type=int, default=500)
    ap.add_argument("--extra-eval", type=int, default=5000,
                    help="also report accuracy on this many more held-out dates (0: skip)")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=500,
                    help="greedy accuracy on --monitor dates every this many steps (0: never)")
    ap.add_argument("--monitor", type=int, default=300)
    ap.add_argument("--write-data", metavar="DIR",
                    help="write the data instead of training (no PyTorch needed): DIR/train.tsv, the "
                         "--steps x --batch pairs of the training stream, and DIR/heldout.tsv, the --held-out "
                         "pairs the accuracy is measured on, for `fixformer train` (docs/training.md)")
    args = ap.parse_args(argv)
    if args.write_data:
        return write_data(args.write_data, args.steps * args.batch, args.held_out)

    t0 = time.time()
    torch.set_num_threads(2)
    torch.manual_seed(args.seed)
    random.seed(args.seed)

    tokens = vocabulary_tokens()
    vocab = Vocab(tokens)
    V = len(tokens)
    exclude = reserved_dates()
    batches = training_batches(training_stream(TRAIN_SEED, exclude), args.batch,
                               random.Random(TRAIN_SEED + 1))
    monitor = make_dates(args.monitor, MONITOR_SEED) if args.eval_every else []
    longest = max(len(sample(random.Random(s))[0]) for s in range(2000))
    assert longest + 8 <= args.max_seq, "max_seq too small for the sources"

    model = DateModel(V, args.d_model, args.heads, args.d_ff, args.encoder_layers,
                      args.decoder_layers, args.dropout, args.max_seq)
    n_params = sum(p.numel() for p in model.parameters())
    print("vocab %d, parameters %d (%.1f KiB float32), %d reserved held-out dates"
          % (V, n_params, n_params * 4 / 1024, len(exclude)), flush=True)

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9,
                            weight_decay=0.01)
    total = args.steps

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        p = (step - args.warmup) / max(1, total - args.warmup)
        return args.lr * (0.02 + 0.98 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))

    model.train()
    t_train = time.time()
    run_loss, run_n = 0.0, 0
    step = 0
    while step < total:
        batch = next(batches)
        src, pad = encode_batch(vocab, [t for t, _ in batch])
        tgt_in, tgt_out = encode_targets(vocab, [i for _, i in batch])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        logits = model(src, pad, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        run_loss += loss.item()
        run_n += 1
        if args.minutes is not None and step == 50:
            per = (time.time() - t_train) / 50
            fit = int(args.minutes * 60 / per)
            if fit < total:
                print("--minutes %.1f: %.3f s/step, training %d steps instead of %d"
                      % (args.minutes, per, fit, total), flush=True)
                total = max(fit, 51)
        if step % args.log_every == 0 or step == total:
            el = time.time() - t_train
            print("step %5d/%d  loss %.4f  lr %.2e  %.0f s (%.3f s/step)"
                  % (step, total, run_loss / run_n, lr_at(step - 1), el, el / step), flush=True)
            run_loss, run_n = 0.0, 0
        if args.eval_every and step % args.eval_every == 0 and step < total:
            macc, mwrong = accuracy(model, vocab, monitor)
            print("  monitor (%d dates, seed %d): %.2f %% exact" % (len(monitor), MONITOR_SEED, 100 * macc),
                  flush=True)
            model.train()
    train_seconds = time.time() - t_train

    # ---- export ---------------------------------------------------------------
    os.makedirs(args.out, exist_ok=True)
    st_path = os.path.join(args.out, "dates.safetensors")
    vocab_path = os.path.join(args.out, "dates.vocab.json")
    lua_path = os.path.join(args.out, "dates.lua")
    write_safetensors(st_path, model.export_tensors())
    with open(vocab_path, "w") as f:
        json.dump(vocabulary_json(tokens), f, indent=None)
        f.write("\n")
    with open(lua_path, "w") as f:
        f.write(LUA_TEMPLATE % dict(d_model=args.d_model, heads=args.heads, d_ff=args.d_ff,
                                    encoder_layers=args.encoder_layers,
                                    decoder_layers=args.decoder_layers, vocab=V,
                                    max_seq=args.max_seq))

    # ---- evaluate the written files -------------------------------------------
    loaded, lvocab, _ = load_model(lua_path)
    held = make_dates_with_format(max(args.held_out, HELD_OUT_RESERVED) + args.extra_eval,
                                  HELD_OUT_SEED)
    main_set = [(t, i) for t, i, _ in held[: args.held_out]]
    acc, wrong = accuracy(loaded, lvocab, main_set)
    for t, e, o in wrong[:20]:
        print("  wrong: %-32r expected %s got %r" % (t, e, o))
    if args.extra_eval:
        extra = held[HELD_OUT_RESERVED:]    # dates may have been trained on; texts are new draws
        eacc, ewrong = accuracy(loaded, lvocab, [(t, i) for t, i, _ in extra])
        per_fmt = {}
        fmt_of = {t: f for t, _, f in extra}
        for t, e, o in ewrong:
            per_fmt[fmt_of[t]] = per_fmt.get(fmt_of[t], 0) + 1
        print("extra check: %d more generated dates (seed %d, samples %d..): %.2f %% exact%s"
              % (len(extra), HELD_OUT_SEED, HELD_OUT_RESERVED, 100 * eacc,
                 (", errors by format " + json.dumps(per_fmt)) if per_fmt else ""))
        for t, e, o in ewrong[:10]:
            print("  wrong: %-32r expected %s got %r" % (t, e, o))
    size = os.path.getsize(st_path)
    print("wrote %s (%d bytes), %s, %s" % (st_path, size, vocab_path, lua_path))
    print("parameters %d; training %d steps took %.1f s; whole run %.1f s"
          % (n_params, total, train_seconds, time.time() - t0))
    print("held-out accuracy: %d/%d = %.2f %% (seed %d)"
          % (len(main_set) - len(wrong), len(main_set), 100 * acc, HELD_OUT_SEED), flush=True)
    if acc < 0.99:
        print("FAIL: held-out accuracy below 99 %", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
