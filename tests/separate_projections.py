#!/usr/bin/python3
"""Projections stored apart give bit for bit what the fused file gives.

For models with self- and cross-attention, with and without biases, SwiGLU and
not, full heads and grouped-query (k/v with kv_heads * d_k rows): `fixformer
init` writes the fused file, reference.split_projections the same tensors as
Hugging Face stores them (self_attn.{q,k,v}_proj.*,
multihead_attn.{q,k,v}_proj.*, gate_proj.* / up_proj.*).  Then, on both files:
`run` on the runtime, tcc and cc (outputs byte-identical), greedy `generate`
(same ids), `emit --weights` (byte-identical blob and code) and
`info --weights` (ok, the fused names in its table).

  separate_projections.py --fixformer BIN
"""
import argparse
import filecmp
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from configs import write_description  # noqa: E402
from reference import read_safetensors, split_projections, write_safetensors  # noqa: E402

CONFIGS = [
    dict(name="enc_gelu", arch="encoder", d_model=24, heads=3, d_ff=37, layers=2, activation="gelu", vocab=29,
         positional="learned", token_types=2, embed_norm=True, lm_head=False, max_seq=12),
    dict(name="llama_like", arch="decoder-only", d_model=16, heads=2, d_ff=21, layers=2, norm="pre",
         norm_kind="rmsnorm", activation="swiglu", bias=False, vocab=31, positional="rope", max_seq=12),
    dict(name="dec_swiglu_bias", arch="decoder-only", d_model=18, heads=3, d_ff=13, layers=1, activation="swiglu",
         vocab=23, positional="sinusoidal", head_bias=True, tie_embeddings=False, max_seq=12),
    dict(name="encdec_relu", arch="encoder-decoder", d_model=16, heads=4, d_ff=19, encoder_layers=2,
         decoder_layers=2, final_norm=True, vocab=19, positional="sinusoidal", max_seq=12),
    dict(name="encdec_swiglu_nobias", arch="encoder-decoder", d_model=12, heads=2, d_ff=9, encoder_layers=1,
         decoder_layers=1, activation="swiglu", bias=False, positional="none", max_seq=12),
    # grouped-query: k_proj / v_proj stored with kv_heads * d_k rows (and biases), cross-attention too
    dict(name="gqa_swiglu_bias", arch="decoder-only", d_model=24, heads=6, kv_heads=2, d_ff=20, layers=2,
         activation="swiglu", vocab=27, positional="rope", rope_pairing="interleaved", max_seq=12),
    dict(name="encdec_mqa", arch="encoder-decoder", d_model=16, heads=4, kv_heads=1, d_ff=19, encoder_layers=1,
         decoder_layers=2, vocab=19, positional="sinusoidal", max_seq=12),
]


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd[:3]), p.returncode, p.stderr.strip()))
    return p.stdout


def check(ff, cfg, d, env):
    """The problems of one config (empty: all identical)."""
    model = write_description(cfg, d)
    fused, apart = os.path.join(d, "fused.safetensors"), os.path.join(d, "apart.safetensors")
    run([ff, "init", model, "-o", fused, "--seed", "3"])
    tensors = read_safetensors(fused)
    parts = split_projections(tensors, cfg["d_model"], cfg.get("activation") == "swiglu")
    write_safetensors(apart, parts)
    problems = [] if len(parts) > len(tensors) else ["nothing was split"]
    rng = np.random.RandomState(len(cfg["name"]))
    S = 5
    if cfg.get("vocab"):
        src = rng.randint(0, cfg["vocab"], size=(2, S)).astype(np.int32)
    else:
        src = rng.standard_normal((2, S, cfg["d_model"])).astype(np.float32)
    np.save(os.path.join(d, "in.npy"), src)
    np.save(os.path.join(d, "len.npy"), np.array([S, 3], np.int32))
    flags = ["--input", os.path.join(d, "in.npy"), "--lengths", os.path.join(d, "len.npy")]
    if cfg["arch"] == "encoder-decoder":
        np.save(os.path.join(d, "tgt.npy"), src[:, :4])
        flags += ["--target-input", os.path.join(d, "tgt.npy")]
    for engine in ("runtime", "tcc", "cc"):
        outs = []
        for w in (fused, apart):
            out = os.path.join(d, "out_%s_%s.npy" % (engine, os.path.basename(w)))
            run([ff, "run", model, "--weights", w, "--output", out, "--engine", engine] + flags, env)
            outs.append(out)
        if not filecmp.cmp(outs[0], outs[1], shallow=False):
            problems.append("run --engine %s: outputs differ" % engine)
    if cfg.get("vocab") and cfg["arch"] != "encoder" and cfg.get("lm_head", True):
        ids = [run([ff, "generate", model, "--weights", w, "--tokens", "1 2 3", "--max-new", "5", "--engine", "tcc",
                    "--bos", "1"], env) for w in (fused, apart)]
        if ids[0] != ids[1] or not ids[0].strip():
            problems.append("generate: %r against %r" % tuple(ids))
    for w in (fused, apart):
        run([ff, "emit", model, "-o", os.path.join(d, "emit_" + os.path.basename(w)), "--weights", w, "--with-main"])
    for f in (cfg["name"] + ".c", cfg["name"] + ".weights", cfg["name"] + "_main.c"):
        a, b = (open(os.path.join(d, "emit_" + os.path.basename(w), f), "rb").read() for w in (fused, apart))
        if f.endswith(".c"):  # but for the command line in the header comment, which names the weights
            a, b = (b"\n".join(ln for ln in x.split(b"\n") if not ln.startswith(b" * command:")) for x in (a, b))
        if a != b:
            problems.append("emit: %s differs" % f)
    table = run([ff, "info", model, "--weights", apart])
    if "-- ok:" not in table or "self_attn.in_proj_weight" not in table or "q_proj" in table:
        problems.append("info --weights: " + table[-300:])
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "xdg"))  # the cc engine's cache: ours alone
        for cfg in CONFIGS:
            d = os.path.join(tmp, cfg["name"])
            os.mkdir(d)
            try:
                problems = check(args.fixformer, cfg, d, env)
            except RuntimeError as e:
                problems = [str(e)]
            failed += bool(problems)
            print("%-22s %s" % (cfg["name"], "identical (run x3 engines, generate, emit, info)" if not problems
                                else "FAIL: " + "; ".join(problems)), flush=True)
    print("%d configs, %d failed" % (len(CONFIGS), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
