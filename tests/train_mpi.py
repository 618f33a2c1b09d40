#!/usr/bin/python3
"""The parts of a training step: micro-batches (and, next, MPI ranks).

  parts     a step's parts drop out what the whole batch does: --micro-batch
            with dropout trains the same bytes as the whole batch at once
            (every part padded to the whole batch's shape).

  train_mpi.py --fixformer FF [--mpirun MPIRUN --nompi FF_WITHOUT_MPI] [--only PART] [--keep DIR]
"""
import argparse
import hashlib
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import write_description  # noqa: E402

TOKENS = ["<pad>", "<bos>", "<eos>", "<unk>"] + list(" abcdefghijklmnopqrstuvwxyz")
LIMIT = 60  # seconds for one mpirun (its --timeout; the test's own is longer)
BOUND = 1e-5  # 2 ranks against 1 thread after 10 steps: max |a - b| / max |b| per tensor (docs/training.md)
WRAPPER = """#!/bin/sh
# runs the command in rank$R/ beside this file (R: this process's rank), its pid in rank$R/pid
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
cd "$(dirname "$0")/rank$r" || exit 9
echo $$ >pid
exec "$@"
"""


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def metadata(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))["__metadata__"]


def files(folder):
    return {n: sha(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
            if os.path.isfile(os.path.join(folder, n)) and n != "pid"}


class Env:
    def __init__(self, args, root):
        self.ff, self.root = os.path.abspath(args.fixformer), root  # (the ranks run in folders of their own)
        self.nompi = os.path.abspath(args.nompi) if args.nompi else None
        self.mpirun = [args.mpirun, "-q", "--oversubscribe", "--timeout", str(LIMIT)] if args.mpirun else None
        if self.mpirun and os.geteuid() == 0:
            self.mpirun.insert(1, "--allow-run-as-root")  # (CI runs as root)
        # shared memory without CMA (a container may forbid process_vm_readv)
        self.env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none",
                        OMPI_MCA_rmaps_base_oversubscribe="1")
        with open(self.path("vocab.json"), "w") as f:
            json.dump({"tokens": TOKENS, "pad": 0, "bos": 1, "eos": 2, "unk": 3}, f)
        rng = random.Random(5)
        words = ["".join(rng.choice(TOKENS[5:]) for _ in range(rng.randint(1, 7))) for _ in range(24)]
        self.data = self.write("pairs.tsv", "".join("%s\t%s\n" % (w, w[::-1] + " " + w[:2]) for w in words))
        cfg = {"name": "mpi_model", "arch": "encoder-decoder", "d_model": 16, "heads": 2, "d_ff": 24,
               "encoder_layers": 1, "decoder_layers": 1, "vocab": len(TOKENS), "max_seq": 12, "final_norm": True,
               "positional": "sinusoidal", "vocabulary": "vocab.json"}
        self.model = write_description(cfg, root, "mpi_model.lua")
        self.d = cfg["d_model"]
        self.wrapper = self.write("ranks/wrap.sh", WRAPPER)
        os.chmod(self.wrapper, 0o755)

    def path(self, name):
        return os.path.join(self.root, name)

    def write(self, name, text):
        os.makedirs(os.path.dirname(self.path(name)), exist_ok=True)
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def train(self, *flags, ff=None, model=None, check=True, env=None):
        p = subprocess.run([ff or self.ff, "train", model or self.model] + [str(f) for f in flags],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env or self.env,
                           timeout=LIMIT + 30)
        if check and p.returncode:
            raise AssertionError("train %s: exit %d: %s" % (" ".join(map(str, flags)), p.returncode, p.stderr))
        return p

    def ranks(self, data=(None, None)):
        """rank folders ranks/rank0, ranks/rank1 (emptied), each with data.tsv: the shared file, or data[r]'s text
        ('' for none)"""
        for r in (0, 1):
            d = self.path("ranks/rank%d" % r)
            os.makedirs(d, exist_ok=True)
            for n in os.listdir(d):
                os.unlink(os.path.join(d, n))
            if data[r] is None:
                os.symlink(self.data, os.path.join(d, "data.tsv"))
            elif data[r]:
                with open(os.path.join(d, "data.tsv"), "w") as f:
                    f.write(data[r])
        return self.path("ranks/rank0"), self.path("ranks/rank1")

    def mpi(self, *flags, ff=None, model=None, wrap=False, check=True, start=False):
        """mpirun -np 2 fixformer train (wrap: each rank in its folder, --data data.tsv there)"""
        cmd = self.mpirun + ["-np", "2"] + ([self.wrapper] if wrap else []) + [ff or self.ff, "train",
                                                                                model or self.model]
        cmd += (["--data", "data.tsv"] if wrap else []) + [str(f) for f in flags]
        if start:
            return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    stdin=subprocess.DEVNULL, env=self.env)
        t = time.time()
        # (a failure expected: mpirun need not give ranks that have all ended 1 s to end)
        env = self.env if check else dict(self.env, OMPI_MCA_odls_base_sigkill_timeout="0")
        p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=LIMIT + 30)
        assert time.time() - t < LIMIT, "mpirun ran into its time limit: %s" % p.stderr
        if check and p.returncode:
            raise AssertionError("mpirun train %s: exit %d: %s" % (" ".join(map(str, flags)), p.returncode,
                                                                     p.stderr))
        return p


def scaled_error(got, want, d):
    """max over tensors of max |a - b| / max |b| (max |b| at least 1e-3 of the largest weight), the key rows of
    in_proj_bias aside; and their largest difference"""
    floor = 1e-3 * max(float(np.abs(w).max()) for w in want.values())
    worst, keys = (0.0, ""), 0.0
    for name, b in want.items():
        a = got[name]
        if name.endswith("in_proj_bias"):
            keys = max(keys, float(np.abs(a[d:2 * d] - b[d:2 * d]).max()))
            a, b = np.delete(a, np.s_[d:2 * d]), np.delete(b, np.s_[d:2 * d])
        worst = max(worst, (float(np.abs(a - b).max()) / max(float(np.abs(b).max()), floor), name))
    return worst, keys


def log_rows(path):
    with open(path) as f:
        head = f.readline().strip().split(",")
        return [dict(zip(head, line.strip().split(","))) for line in f]


def one_line(returncode, stderr, want):
    """a non-zero exit, and one line from fixformer (beside mpirun's own) that says want"""
    lines = [l for l in stderr.splitlines() if l.startswith("fixformer")]
    assert returncode != 0 and len(lines) == 1 and want in lines[0], (returncode, stderr)
    return lines[0]


# ---- the parts ------------------------------------------------------------------------------------

def check_parts(env):
    common = ["--data", env.data, "--steps", 4, "--batch", 8, "--dropout", 0.2, "--seed", 3, "-q"]
    env.train("-o", env.path("whole.safetensors"), *common)
    env.train("-o", env.path("micro.safetensors"), "--micro-batch", 3, *common)
    assert sha(env.path("whole.safetensors")) == sha(env.path("micro.safetensors")), \
        "micro-batches with dropout train otherwise than the whole batch"
    print("  parts: --micro-batch 3 with dropout 0.2 trains the whole batch's bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--mpirun", help="MPI's launcher (the build has MPI)")
    ap.add_argument("--nompi", help="the same fixformer built without MPI")
    parts = [("parts", check_parts)]
    ap.add_argument("--only", choices=[n for n, _ in parts])
    ap.add_argument("--keep", help="work in this folder (kept)")
    args = ap.parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        env = Env(args, root)
        for name, fn in parts:
            if args.only not in (None, name) or (not args.mpirun and name not in ("parts", "nompi")):
                continue
            t = time.time()
            fn(env)
            print("    (%s: %.1f s)" % (name, time.time() - t))
    print("train_mpi: ok (%.1f s)" % (time.time() - start))


if __name__ == "__main__":
    main()
