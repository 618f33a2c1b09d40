#!/usr/bin/python3
"""Generated training code (gen/train.lua) against the runtime's backward (the
oracle) and PyTorch autograd.

  gradients  train_grad.py's configs (every architecture style: encoder,
             decoder-only, encoder-decoder; post- and pre-LN; LayerNorm and
             RMSNorm; each activation and position kind, both RoPE pairings;
             grouped-query and multi-query attention; tied / untied heads, head
             bias, bias = false, embed_norm and token types; padding and
             ignored labels; label smoothing) and random ones, on the tcc and
             cc engines: the loss and every parameter's gradient within
             TOL_RUNTIME of the runtime's (scaled error as train_grad.py's:
             max|a - b| / max|b| per tensor, max|b| at least 1e-3 of the
             largest gradient) and within 1e-4 of PyTorch autograd; with
             dropout 0 and 0.1 (PyTorch given the runtime's masks: the same
             masks, or the gradients would differ by O(1)); the engines'
             gradient written into a buffer of NaNs (set_grad: the first
             writers write, the rest is zeroed) and, with every sub-layer
             recomputed, added into zeros: the same bits.
  threads    2 threads give the bytes of 1 (the products split over output
             columns, attention over sequences and head groups), dropout on.
  parts      a batch larger than the code's (parts of its batch, first counting
             on) gives the whole batch's loss and gradient (set_grad: the
             first part's written, the others' added).
  emitted    `fixformer emit --train` (generic ISA) built with gcc, clang and
             tcc (-std=c99 -Wall -Wextra -Werror) into tests/train_device.c, a
             program with static buffers only: 3 AdamW steps (dropout 0.1) give
             the runtime's parameters (train_tool --steps) within float
             reassociation (TOL_STEPS); with --isa native under gcc
             -march=native on 2 threads too.
  train      `fixformer train --engine cc` (and tcc) 10 steps with dropout:
             the runtime engine's weights, but for the key rows of the
             in_proj biases (their gradient is 0 but for rounding, which Adam's
             normalisation turns into steps of about lr: bounded by 2 lr steps).
  errors     a batch longer than the code's shapes, emit --train with
             --weights, and a model without a head are refused with one line.

  train_gen.py --tool TRAIN_TOOL --fixformer FIXFORMER [--only PART] [--engines tcc,cc]
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
import train_grad as tg  # noqa: E402
from reference import read_safetensors, weight_names, write_safetensors  # noqa: E402
from configs import write_description  # noqa: E402

# Generated code and the runtime are two float32 computations in other orders (products in tiles
# with FMA, sums over 8 lanes, the ISA's exp): on these peaked-attention configs the runtime
# itself is up to 1.2e-5 from PyTorch's float64 (train_grad.py), and the two are up to 1.8e-5
# apart (measured over every config below, avx512 and generic kernels alike) in bias and norm
# gradients that sum many cancelling terms; the loss agrees to 1e-7.
TOL_RUNTIME = 3e-5
TOL_LOSS = 1e-6
# Parameters after a few AdamW steps: Adam divides each gradient by its own magnitude, so an
# element whose gradient is small carries the gradients' rounding differences into its step
# relative to that magnitude; measured up to 1.7e-5 scaled after 3 steps on these configs.
TOL_STEPS = 5e-5


def worst(got, want):
    """(scaled error, tensor) of gradients got against want, train_grad.py's measure"""
    floor = 1e-3 * max(float(np.abs(g).max()) for g in want.values())
    assert sorted(got) == sorted(want), sorted(set(got) ^ set(want))
    return max((tg.scaled_error(got[k], want[k], floor), k) for k in want)


# hidden layers of 256 floats (SwiGLU: gate | up of 128 each): the generated code pads dh's rows
# (gen/train.lua), so that its activations' backward go row by row, one per activation
PADDED = [("padded", tg.config("pad_" + act, arch, activation=act, d_ff=128 if act == "swiglu" else 256, **kw), s, -100)
          for act, arch, s, kw in (("relu", "decoder-only", 0.0, {}), ("gelu", "encoder", 0.1, {"norm": "pre"}),
                                   ("gelu_tanh", "decoder-only", 0.0, {"positional": "learned"}),
                                   ("silu", "encoder-decoder", 0.1, {"norm": "pre"}),
                                   ("swiglu", "decoder-only", 0.0, {"norm_kind": "rmsnorm", "positional": "rope"}))]


def check_gradients(tool, root, engines, n_random):
    cases = tg.CASES + PADDED + tg.random_cases(n_random, 52)
    by, recomputed = {}, set()
    for i, (group, cfg, smoothing, ignore) in enumerate(cases):
        case = tg.Case(tool, root, group, cfg, smoothing, ignore, 2000 + i)
        for p in (0.0, 0.1):
            flags = ("--dropout", str(p), "--seed", str(i), "--step", "2", "--masks") if p else ()
            rt = case.run(*flags)
            ref = case.reference(rt[3], p) if p else case.reference()
            for engine in engines:
                got = case.run("--engine", engine, "--set-grad", *flags)
                assert got[1] == rt[1], (cfg["name"], engine, got[1], rt[1])
                lerr = abs(got[0] - rt[0]) / max(1.0, abs(rt[0]))
                err, where = worst(got[2], rt[2])
                if err > TOL_RUNTIME or lerr > TOL_LOSS:
                    raise AssertionError("%s (%s, dropout %g): %s differs from the runtime's by %.3e scaled, the loss by "
                                         "%.1e" % (cfg["name"], engine, p, where, err, lerr))
                perr = tg.compare(case, "%s dropout %g" % (engine, p), got, ref)
                if engine == engines[0]:  # recomputed sub-layers, the gradient added into zeros: the same bits
                    again = case.run("--engine", engine, "--recompute", "1", *flags)
                    same = again[:2] == got[:2] and all(np.array_equal(again[2][k], got[2][k]) for k in got[2])
                    assert same, "%s (%s, dropout %g): --recompute (added) changes the loss or the gradient" % (
                        cfg["name"], engine, p)
                    recomputed.add(cfg["name"])
                key = (group, engine, p)
                old = by.get(key, (0.0, 0.0))
                by[key] = (max(old[0], err), max(old[1], perr))
    for (group, engine, p), (err, perr) in sorted(by.items()):
        print("  %-8s %-3s dropout %-3g  vs runtime %.2e  vs PyTorch %.2e" % (group, engine, p, err, perr))
    print("  gradients: %d configs x dropout 0, 0.1 x %s: within %g of the runtime, 1e-4 of PyTorch"
          % (len(cases), ",".join(engines), TOL_RUNTIME))
    print("  recompute: %d configs x dropout 0, 0.1 on %s: the same loss and gradient to the bit (written, "
          "set_grad, and added)"
          % (len(recomputed), engines[0]))


def big_batch(case, B, S, T, seed):
    """case's batch replaced by B sequences of S (and T) positions, some padded"""
    rng = np.random.RandomState(seed)
    V = case.cfg["vocab"]
    case.src = rng.randint(0, V, size=(B, S)).astype(np.int32)
    case.lengths = rng.randint(S // 2, S + 1, size=B).astype(np.int32)
    if case.tgt is not None:
        case.tgt = rng.randint(0, V, size=(B, T)).astype(np.int32)
    case.labels = rng.randint(0, V, size=(B, T if case.tgt is not None else S)).astype(np.int32)
    if case.tgt is None:  # a label past its sequence's length is padding's: ignored (or the batch is refused)
        case.labels[np.arange(S)[None, :] >= case.lengths[:, None]] = case.ignore
    for flag, a in (("--src", case.src), ("--lengths", case.lengths), ("--tgt", case.tgt), ("--labels", case.labels)):
        if a is not None:
            np.save(os.path.join(case.dir, flag[2:] + ".npy"), a)


def check_threads(tool, root, engines):
    # large enough that the products and attention split (a million multiply-adds and more)
    cfgs = [tg.config("thr_encdec", "encoder-decoder", d_model=64, heads=4, d_ff=256, kv_heads=2, max_seq=32),
            tg.config("thr_llama", "decoder-only", norm="pre", norm_kind="rmsnorm", activation="swiglu",
                      positional="rope", d_model=64, heads=4, d_ff=192, max_seq=32, vocab=512)]  # padded logits
    for i, c in enumerate(cfgs):
        case = tg.Case(tool, root, "threads", c, 0.1, -100, 3000 + i)
        big_batch(case, 8, 32, 30, 3000 + i)
        for engine in engines:
            one = case.run("--engine", engine, "--threads", "1", "--dropout", "0.1", "--seed", "4")
            two = case.run("--engine", engine, "--threads", "2", "--dropout", "0.1", "--seed", "4")
            assert one[0] == two[0], (c["name"], engine, one[0], two[0])
            for k in one[2]:
                assert np.array_equal(one[2][k], two[2][k]), "%s (%s): %s differs on 2 threads" % (c["name"], engine, k)
    print("  threads: 2 threads give the bytes of 1 (%d configs, %s, dropout 0.1)" % (len(cfgs), ",".join(engines)))


def check_parts(tool, root, engines):
    c = tg.config("parts_dec", "decoder-only", positional="learned", final_norm=True)
    case = tg.Case(tool, root, "parts", c, 0.0, -100, 3100)
    for engine in engines:
        whole = case.run("--engine", engine, "--dropout", "0.1", "--seed", "6", "--first", "2")
        part = case.run("--engine", engine, "--dropout", "0.1", "--seed", "6", "--first", "2", "--shape", "1,0,0",
                        "--set-grad")
        assert abs(part[0] - whole[0]) <= 1e-6 * abs(whole[0]), (engine, part[0], whole[0])
        err, where = worst(part[2], whole[2])
        assert err <= 1e-6, "%s: a batch in parts of 1 differs by %.2e at %s" % (engine, err, where)
    print("  parts: a batch of 3 through code made for 1 (first counting on) gives the whole batch's gradient")


def batch_file(case, path):
    """the batch as train_device.c reads it"""
    ids = [case.src.shape[0], case.src.shape[1], 0 if case.tgt is None else case.tgt.shape[1], 1]
    parts = [np.array(ids, np.int32), case.src, case.lengths]
    if case.tgt is not None:
        parts.append(case.tgt)
    parts.append(case.labels)
    with open(path, "wb") as f:
        for a in parts:
            f.write(np.ascontiguousarray(a, dtype="<i4").tobytes())


def flat_params(case):
    return np.concatenate([case.weights[n].reshape(-1) for n, _ in weight_names(case.cfg)]).astype("<f4")


def unflat(case, flat):
    out, at = {}, 0
    for n, shape in weight_names(case.cfg):
        k = int(np.prod(shape))
        out[n] = flat[at:at + k].reshape(shape)
        at += k
    assert at == flat.size
    return out


def k_rows(cfg):
    """the key rows of each in_proj_bias: a gradient of 0 but for rounding (see the docstring)"""
    c = tg.RefModel(cfg, {}).c
    d, kvd = c["d_model"], c["kv_heads"] * (c["d_model"] // c["heads"])
    return lambda name: slice(d, d + kvd) if name.endswith("in_proj_bias") else None


def compare_weights(got, want, skip, lr, steps, what):
    floor = 1e-3 * max(float(np.abs(w).max()) for w in want.values())
    err, where = 0.0, None
    for k in want:
        a, b = got[k], want[k]
        rows = skip(k)
        if rows is not None:
            assert float(np.abs(a[rows] - b[rows]).max()) <= 2 * steps * lr, (what, k)
            keep = np.ones(len(b), bool)
            keep[rows] = False
            a, b = a[keep], b[keep]
        e = float(np.abs(a - b).max()) / max(float(np.abs(b).max()), floor)
        if e > err:
            err, where = e, k
    return err, where


def state_bytes(header):
    """NAME_TRAIN_STATE_BYTES of an emitted training header"""
    with open(header) as f:
        return int(re.search(r"#define \w+_TRAIN_STATE_BYTES (\d+)", f.read()).group(1))


def check_emitted(tool, ff, root):
    cfgs = [tg.config("dev_encdec", "encoder-decoder", norm="pre", activation="gelu", positional="sinusoidal",
                      final_norm=True, tie_embeddings=False, head_bias=True, kv_heads=1),
            tg.config("dev_llama", "decoder-only", norm="pre", norm_kind="rmsnorm", activation="swiglu",
                      positional="rope", bias=False, d_model=16, heads=4, kv_heads=2, final_norm=True)]
    compilers = [cc for cc in ("gcc", "clang", "tcc") if shutil.which(cc)]
    assert compilers, "no C compiler"
    steps, lr, p, out = 3, 3e-3, 0.1, []
    for i, c in enumerate(cfgs):
        case = tg.Case(tool, root, "emitted", c, 0.1, -100, 3200 + i)
        want = read_safetensors(os.path.join(case.run("--steps", str(steps), "--lr", str(lr), "--weight-decay", "0.1",
                                                      "--clip", "1.0", "--dropout", str(p), "--seed", "9")[5],
                                             "params.safetensors"))
        shape = "%d,%d" % (case.src.shape[1], case.tgt.shape[1] if case.tgt is not None else case.src.shape[1])
        emit = os.path.join(case.dir, "emit")
        r = subprocess.run([ff, "emit", case.desc, "-o", emit, "--train", "--batch", str(case.src.shape[0]), "--seq",
                            shape], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(os.path.join(case.dir, "params.f32"), "wb") as f:
            f.write(flat_params(case).tobytes())
        batch_file(case, os.path.join(case.dir, "batch.i32"))
        builds = [(cc, ["-O2"]) for cc in compilers]
        if "gcc" in compilers:
            native = os.path.join(case.dir, "native")
            r = subprocess.run([ff, "emit", case.desc, "-o", native, "--train", "--batch", str(case.src.shape[0]),
                                "--seq", shape, "--isa", "native"], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            builds.append(("gcc", ["-O3", "-march=native", "-DFF_THREADS", "-pthread", "-I" + native]))
            recompute = os.path.join(case.dir, "recompute")  # --recompute: a smaller state, the same steps
            r = subprocess.run([ff, "emit", case.desc, "-o", recompute, "--train", "--batch", str(case.src.shape[0]),
                                "--seq", shape, "--recompute"], capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            sizes = [state_bytes(os.path.join(f, c["name"] + "_train.h")) for f in (emit, recompute)]
            assert sizes[1] < sizes[0], "--recompute: a state of %d bytes, without %d" % (sizes[1], sizes[0])
            builds.append(("gcc", ["-O2", "-DRECOMPUTE"]))
        for cc, extra in builds:
            name = c["name"]
            tag = "_native" if "-march=native" in extra else "_re" if "-DRECOMPUTE" in extra else ""
            exe = os.path.join(case.dir, "dev_%s%s" % (cc, tag))
            src_dir = native if "-march=native" in extra else recompute if "-DRECOMPUTE" in extra else emit
            argv = [cc, "-std=c99", "-Wall", "-Wextra", "-Werror"] + extra + [
                "-I" + src_dir, "-DMODEL=" + name, "-DUMODEL=" + name.upper(), '-DHEADER="%s_train.h"' % name,
                "-o", exe, os.path.join(HERE, "train_device.c"), os.path.join(src_dir, name + "_train.c"), "-lm"]
            r = subprocess.run(argv, capture_output=True, text=True)
            assert r.returncode == 0, "%s: %s" % (" ".join(argv), r.stderr[-3000:])
            result = os.path.join(case.dir, "after_%s%s.f32" % (cc, tag))
            threads = "2" if "-DFF_THREADS" in extra else "1"
            r = subprocess.run([exe, os.path.join(case.dir, "params.f32"), os.path.join(case.dir, "batch.i32"),
                                str(steps), str(lr), "0.1", "1.0", str(p), "9", "0.1", threads, result],
                               capture_output=True, text=True)
            assert r.returncode == 0, (cc, r.stderr)
            got = unflat(case, np.fromfile(result, dtype="<f4"))
            if tag == "_re":
                with open(result, "rb") as a, open(os.path.join(case.dir, "after_gcc.f32"), "rb") as b:
                    assert a.read() == b.read(), "%s: the --recompute program's steps differ from the other's" % name
            err, where = compare_weights(got, want, k_rows(c), lr, steps, name)
            assert err <= TOL_STEPS, "%s (%s %s): %s differs from the runtime's after %d steps by %.2e" % (
                name, cc, " ".join(extra), where, steps, err)
            out.append(("%s %s" % (cc, "native" if tag == "_native" else "generic --recompute" if tag == "_re" else "generic"), err))
    print("  emitted: %d models, %d AdamW steps (dropout %g) built with %s: the runtime's parameters (worst %.1e)"
          % (len(cfgs), steps, p, ", ".join(sorted(set(w for w, _ in out))), max(e for _, e in out)))


def check_train(ff, root, engines):
    d = os.path.join(root, "cli")
    os.makedirs(d)
    rng = random.Random(5)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 6))) for _ in range(40)]
    data = os.path.join(d, "rev.tsv")
    with open(data, "w") as f:
        f.write("".join(w + "\t" + w[::-1] + "\n" for w in words))
    vocab = os.path.join(d, "vocab.json")
    with open(vocab, "w") as f:
        f.write('{"tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "a", "b", "c", "d", "e", "f", "g", "h"], '
                '"pad": 0, "bos": 1, "eos": 2, "unk": 3}')
    cfg = {"name": "rev", "arch": "encoder-decoder", "d_model": 16, "heads": 4, "d_ff": 24, "layers": 1,
           "vocab": 12, "max_seq": 8, "positional": "sinusoidal", "final_norm": True, "vocabulary": "vocab.json"}
    desc = write_description(cfg, d, "rev.lua")
    lr, steps, out = 3e-3, 10, {}
    for engine, extra in [("runtime", [])] + [(e, []) for e in engines] + [(engines[0] + "_re", ["--recompute"])]:
        out[engine] = os.path.join(d, engine + ".safetensors")
        r = subprocess.run([ff, "train", desc, "--data", data, "-o", out[engine], "--steps", str(steps), "--batch", "16",
                            "--micro-batch", "6", "--lr", str(lr), "--dropout", "0.1", "--label-smoothing", "0.1",
                            "--clip", "1", "--engine", engine.split("_")[0], "-q"] + extra, capture_output=True,
                           text=True)
        assert r.returncode == 0, (engine, r.stderr)
    with open(out[engines[0]], "rb") as a, open(out[engines[0] + "_re"], "rb") as b:
        assert a.read() == b.read(), "train --recompute wrote other weights than without"
    # the trainer's optimizer step in chunks on its threads: 2 threads write the bytes of 1 (a model of
    # 13 chunks of the gradient, with clipping)
    wide = write_description(dict(cfg, name="wide", d_model=64, d_ff=256, layers=2), d, "wide.lua")
    by_threads = []
    for threads in (1, 2):
        path = os.path.join(d, "wide%d.safetensors" % threads)
        r = subprocess.run([ff, "train", wide, "--data", data, "-o", path, "--steps", "4", "--batch", "16", "--lr",
                            str(lr), "--dropout", "0.1", "--clip", "0.5", "--engine", engines[0], "--threads",
                            str(threads), "-q"], capture_output=True, text=True)
        assert r.returncode == 0, (threads, r.stderr)
        with open(path, "rb") as f:
            by_threads.append(f.read())
    assert by_threads[0] == by_threads[1], "train --threads 2 wrote other weights than --threads 1"
    print("  train: fixformer train --engine %s --threads 2 writes the weights of --threads 1" % engines[0])
    want = read_safetensors(out["runtime"])
    for engine in engines:
        err, where = compare_weights(read_safetensors(out[engine]), want, k_rows(cfg), lr, steps, engine)
        assert err <= TOL_STEPS, "train --engine %s: %s differs from the runtime's after %d steps by %.2e" % (
            engine, where, steps, err)
        print("  train: fixformer train --engine %s, %d steps (micro-batches, dropout): the runtime's weights "
              "within %.1e" % (engine, steps, err))


def check_errors(tool, ff, root):
    c = tg.config("err_dec", "decoder-only")
    case = tg.Case(tool, root, "errors", c, 0.0, -100, 3300)
    p = case.run("--engine", "tcc", "--shape", "3,2,0", check=False)
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and "the generated training code takes at most 2" in lines[0], p.stderr
    w = os.path.join(case.dir, "emit_w")
    p = subprocess.run([ff, "emit", case.desc, "-o", w, "--train", "--weights", case.wpath], capture_output=True,
                       text=True)
    assert p.returncode != 0 and "--train writes the training code alone: no --weights" in p.stderr, p.stderr
    assert not os.path.exists(w)
    nohead = dict(c, name="err_nohead", lm_head=False)
    desc = write_description(nohead, case.dir, "nohead.lua")
    p = subprocess.run([ff, "emit", desc, "-o", w, "--train"], capture_output=True, text=True)
    assert p.returncode != 0 and "has no output head" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert not os.path.exists(w)
    p = subprocess.run([ff, "emit", case.desc, "-o", w, "--train", "--seq", "99"], capture_output=True, text=True)
    assert p.returncode != 0 and "max_seq" in p.stderr, p.stderr
    # a label past a sequence's length: padding has none (its rows are left out), every engine refuses
    short = int(np.argmin(case.lengths))
    assert case.lengths[short] < case.labels.shape[1], case.lengths
    bad = case.labels.copy()
    bad[short, case.lengths[short]] = 1
    np.save(os.path.join(case.dir, "labels.npy"), bad)
    for engine in ("runtime", "tcc"):
        p = case.run("--engine", engine, check=False)
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and "padding has no labels" in lines[0], (engine, p.stderr)
    np.save(os.path.join(case.dir, "labels.npy"), case.labels)
    print("  errors: a batch past the code's shapes, --train with --weights, no head, --seq past max_seq, a label "
          "past a sequence's length refused")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--only", choices=["gradients", "threads", "parts", "emitted", "train", "errors"])
    ap.add_argument("--engines", default="tcc,cc")
    ap.add_argument("--random", type=int, default=4)
    ap.add_argument("--keep", help="write the cases under this folder (kept)")
    args = ap.parse_args()
    engines = args.engines.split(",")
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        parts = [("gradients", lambda: check_gradients(args.tool, root, engines, args.random)),
                 ("threads", lambda: check_threads(args.tool, root, engines)),
                 ("parts", lambda: check_parts(args.tool, root, engines)),
                 ("emitted", lambda: check_emitted(args.tool, args.fixformer, root)),
                 ("train", lambda: check_train(args.fixformer, root, engines)),
                 ("errors", lambda: check_errors(args.tool, args.fixformer, root))]
        for name, fn in parts:
            if args.only in (None, name):
                t = time.time()
                fn()
                print("    (%s: %.1f s)" % (name, time.time() - t))
    print("train_gen: ok (%.1f s)" % (time.time() - start))


if __name__ == "__main__":
    main()
