#!/usr/bin/python3
"""Data-parallel training over MPI: `mpirun -np 2 fixformer train`.

  parts     a step's parts drop out what the whole batch does: --micro-batch
            with dropout trains the same bytes as the whole batch at once
            (every part padded to the whole batch's shape).
  parity    mpirun -np 2 (10 steps, dropout, a batch of 7 split 4 + 3,
            held-out evaluation) trains the same bytes as one process with
            --threads 2 (the same split, the same sums), and one thread
            within the stated bound: max |a - b| / max |b| per tensor at most
            1e-5, the key rows of in_proj_bias (a gradient of rounding noise)
            2 lr a step; the losses and held-out figures are equal.
  writes    each rank in its own folder: rank 1 writes nothing, rank 0 the
            weights, the checkpoint, the log (each step once) and the plot.
  resume    2 ranks 5 steps + resume to 10 = 2 ranks 10 steps, byte for byte.
  signals   SIGTERM to rank 1 alone stops both ranks after the same step;
            rank 0 writes the checkpoint and says so in one line, and that
            checkpoint resumed for 10 more steps gives the bytes of a run of
            those steps; so does Ctrl-C (SIGINT) to mpirun, which passes
            SIGTERM on to the ranks.
  failures  bad data (every rank), data that rank 1 alone cannot read, other
            data or another flag on rank 1: mpirun exits non-zero within its
            time limit, one line from fixformer, nothing written.
  engines   the ranks sit outside the engine: mpirun -np 2 --engine tcc
            (generated training code) within the same bound of one process
            on tcc.  (cc compiles the same code with another compiler: left
            out for time.)
  nompi     a fixformer built without MPI refuses under mpirun -np 2 with one
            line and writes nothing; as it does when only the launchers'
            environment says several ranks (OMPI_COMM_WORLD_SIZE, PMI_SIZE);
            one rank trains.

  train_mpi.py --fixformer FF --mpirun MPIRUN --nompi FF_WITHOUT_MPI [--only PART] [--keep DIR]
"""
import argparse
import hashlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import write_description  # noqa: E402
from reference import read_safetensors, weights_distance  # noqa: E402

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
        self.nompi = os.path.abspath(args.nompi)
        self.mpirun = [args.mpirun, "-q", "--oversubscribe", "--timeout", str(LIMIT)]
        if os.geteuid() == 0:
            self.mpirun.insert(1, "--allow-run-as-root")  # (CI runs as root)
        # shared memory without CMA (a container may forbid process_vm_readv)
        self.env = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none",
                        OMPI_MCA_rmaps_base_oversubscribe="1")
        # under AddressSanitizer: Open MPI's own allocations outlive MPI_Finalize (in components it has
        # unloaded, so no suppression can name them); leaks are checked where one process trains
        self.mpi_env = dict(self.env, ASAN_OPTIONS=":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                                                          "detect_leaks=0"])))
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
                                    stdin=subprocess.DEVNULL, env=self.mpi_env)
        t = time.time()
        # (a failure expected: mpirun need not give ranks that have all ended 1 s to end)
        env = self.mpi_env if check else dict(self.mpi_env, OMPI_MCA_odls_base_sigkill_timeout="0")
        p = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, env=env, timeout=LIMIT + 30)
        assert time.time() - t < LIMIT, "mpirun ran into its time limit: %s" % p.stderr
        if check and p.returncode:
            raise AssertionError("mpirun train %s: exit %d: %s" % (" ".join(map(str, flags)), p.returncode,
                                                                     p.stderr))
        return p


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


def check_parity(env):
    common = ["--data", env.data, "--steps", 10, "--batch", 7, "--dropout", 0.1, "--holdout", 4, "--eval-every", 5,
              "--lr", 3e-3, "--seed", 1, "-q"]
    env.mpi("-o", env.path("two.safetensors"), "--log", env.path("two.csv"), *common)
    env.train("-o", env.path("t2.safetensors"), "--log", env.path("t2.csv"), "--threads", 2, *common)
    env.train("-o", env.path("t1.safetensors"), "--log", env.path("t1.csv"), *common)
    assert sha(env.path("two.safetensors")) == sha(env.path("t2.safetensors")), "2 ranks differ from --threads 2"
    two, t2 = read_safetensors(env.path("two.ckpt.safetensors")), read_safetensors(env.path("t2.ckpt.safetensors"))
    assert all(np.array_equal(two[k], t2[k]) for k in t2), "the checkpoints' moments differ from --threads 2"
    assert metadata(env.path("two.ckpt.safetensors"))["ranks"] == "2"
    fields = ("step", "loss", "lr", "grad_norm", "tokens", "valid_loss", "valid_exact")
    rows = [[{k: r[k] for k in fields} for r in log_rows(env.path(n))] for n in ("two.csv", "t2.csv")]
    assert rows[0] == rows[1] and len(rows[0]) == 10, rows
    (err, where), keys = weights_distance(read_safetensors(env.path("two.safetensors")),
                                          read_safetensors(env.path("t1.safetensors")), env.d)
    assert err <= BOUND and keys <= 2 * 10 * 3e-3, (where, err, keys)
    print("  parity: 2 ranks = --threads 2 byte for byte; against 1 thread %.1e (%s), key bias rows %.1e" %
          (err, where, keys))


def check_engines(env):
    common = ["--data", env.data, "--steps", 10, "--batch", 7, "--dropout", 0.1, "--lr", 3e-3, "--seed", 1, "-q"]
    env.mpi("-o", env.path("two_tcc.safetensors"), "--engine", "tcc", *common)
    env.train("-o", env.path("one_tcc.safetensors"), "--engine", "tcc", *common)
    (err, where), keys = weights_distance(read_safetensors(env.path("two_tcc.safetensors")),
                                          read_safetensors(env.path("one_tcc.safetensors")), env.d)
    assert err <= BOUND and keys <= 2 * 10 * 3e-3, (where, err, keys)
    print("  engines: 2 ranks on tcc against one process on tcc %.1e (%s), key bias rows %.1e" % (err, where, keys))


def check_writes(env):
    r0, r1 = env.ranks()
    env.mpi("-o", "w.safetensors", "--log", "w.csv", "--plot", "w.svg", "--steps", 10, "--batch", 6,
            "--save-every", 3, "--seed", 4, wrap=True)
    assert sorted(files(r1)) == ["data.tsv"], "rank 1 wrote %s" % sorted(files(r1))
    assert sorted(files(r0)) == ["data.tsv", "w.ckpt.safetensors", "w.csv", "w.safetensors", "w.svg"], files(r0)
    assert [r["step"] for r in log_rows(os.path.join(r0, "w.csv"))] == [str(s) for s in range(1, 11)]
    print("  writes: rank 0 wrote the weights, checkpoint, log (each step once) and plot; rank 1 nothing")


def check_resume(env):
    common = ["--data", env.data, "--batch", 5, "--dropout", 0.1, "--holdout", 4, "--eval-every", 5, "--schedule",
              "cosine", "--warmup", 2, "--decay-steps", 10, "--seed", 6, "-q"]
    env.mpi("-o", env.path("r10.safetensors"), "--steps", 10, *common)
    env.mpi("-o", env.path("r5.safetensors"), "--steps", 5, *common)
    env.mpi("-o", env.path("r5b.safetensors"), "--steps", 10, "--resume", env.path("r5.ckpt.safetensors"), *common)
    for a, b in (("r10.safetensors", "r5b.safetensors"), ("r10.ckpt.safetensors", "r5b.ckpt.safetensors")):
        assert sha(env.path(a)) == sha(env.path(b)), "%s and %s differ: resume under mpirun is not exact" % (a, b)
    print("  resume: 2 ranks 5 steps + resume to 10 = 2 ranks 10 steps, byte for byte")


def check_signals(env):
    flags = ["--batch", 8, "--seed", 2, "-q"]
    steps = []
    for how in ("rank 1", "mpirun"):
        r0, r1 = env.ranks()
        log = os.path.join(r0, "s.csv")
        p = env.mpi("-o", "s.safetensors", "--log", "s.csv", "--steps", 100000, *flags, wrap=True, start=True)
        deadline = time.time() + LIMIT
        while time.time() < deadline and (not os.path.exists(log) or len(log_rows(log)) < 20):
            time.sleep(0.01)
        if how == "rank 1":
            with open(os.path.join(r1, "pid")) as f:
                os.kill(int(f.read()), signal.SIGTERM)
        else:  # (mpirun passes it on as SIGTERM to both ranks, 1 s later: rank 0 may stop on rank 1's first)
            p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=LIMIT)
        line = one_line(p.returncode, err, "interrupted by %s" % ("a signal to another rank" if how == "rank 1" else ""))
        step = int(metadata(os.path.join(r0, "s.ckpt.safetensors"))["step"])
        assert step >= 20 and "stopped after step %d of 100000" % step in line, (step, line)
        assert sorted(files(r0)) == ["data.tsv", "s.ckpt.safetensors", "s.csv"] and sorted(files(r1)) == ["data.tsv"]
        # the checkpoint continued for 10 steps is what 2 ranks train in step + 10 steps
        env.mpi("-o", "s.safetensors", "--resume", os.path.join(r0, "s.ckpt.safetensors"), "--steps", step + 10,
                *flags, wrap=True)
        env.mpi("-o", "full.safetensors", "--steps", step + 10, *flags, wrap=True)
        for a, b in (("s.safetensors", "full.safetensors"), ("s.ckpt.safetensors", "full.ckpt.safetensors")):
            assert sha(os.path.join(r0, a)) == sha(os.path.join(r0, b)), "%s: stopped + resumed is not exact" % how
        steps.append(step)
    print("  signals: SIGTERM to rank 1 stopped both after step %d, SIGINT to mpirun after step %d; rank 0's "
          "checkpoint resumed to the same bytes" % tuple(steps))


def check_failures(env):
    short = "".join("%s\t%s\n" % (w, w) for w in ("ab", "cd", "ef", "gh"))
    cases = [("bad data everywhere", ("ab\n", "ab\n"), [], "data.tsv:1: no TAB between source and target"),
             ("rank 1 cannot read", (None, ""), [], "rank 1: data.tsv: cannot open"),
             ("other data on rank 1", (None, short), [], "the 2 ranks start from different weights, data"),
             ("a bad flag", (None, None), ["--lr", "x"], "--lr: 'x' is not a number")]
    for what, data, flags, want in cases:
        r0, r1 = env.ranks(data)
        before = files(r0), files(r1)
        p = env.mpi("-o", "f.safetensors", "--steps", 3, "--batch", 4, *flags, wrap=True, check=False)
        one_line(p.returncode, p.stderr, want)
        assert (files(r0), files(r1)) == before, "%s: a rank wrote something" % what
    print("  failures: %d bad inputs under mpirun: one line, a non-zero exit, no hang, nothing written" % len(cases))


def check_nompi(env):
    nompi = env.nompi
    want = "but this fixformer is built without MPI: it would train 2 copies side by side"
    r0, r1 = env.ranks()
    p = env.mpi("-o", "n.safetensors", "--steps", 2, "--batch", 4, ff=nompi, wrap=True, check=False)
    one_line(p.returncode, p.stderr, "started as rank 0 of 2 by an MPI launcher, " + want)
    assert sorted(files(r0)) == sorted(files(r1)) == ["data.tsv"], "a rank without MPI wrote something"
    flags = ["--data", env.data, "-o", env.path("n.safetensors"), "--steps", 2, "--batch", 4]
    for launcher in ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "0"}, {"PMI_SIZE": "2", "PMI_RANK": "0"}):
        p = env.train(*flags, ff=nompi, check=False, env=dict(env.env, **launcher))
        one_line(p.returncode, p.stderr, want)
        assert not os.path.exists(env.path("n.safetensors")), "written under %s" % launcher
    env.train(*flags, "-q", ff=nompi, env=dict(env.env, OMPI_COMM_WORLD_SIZE="1", OMPI_COMM_WORLD_RANK="0"))
    print("  nompi: built without MPI, 2 ranks refused with one line (mpirun, the environment); 1 rank trains")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--mpirun", required=True, help="MPI's launcher")
    ap.add_argument("--nompi", required=True, help="the same fixformer built without MPI")
    parts = [("parts", check_parts), ("parity", check_parity), ("writes", check_writes), ("resume", check_resume),
             ("signals", check_signals), ("failures", check_failures), ("engines", check_engines),
             ("nompi", check_nompi)]
    ap.add_argument("--only", choices=[n for n, _ in parts])
    ap.add_argument("--keep", help="work in this folder (kept)")
    args = ap.parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or tmp
        os.makedirs(root, exist_ok=True)
        env = Env(args, root)
        for name, fn in parts:
            if args.only not in (None, name):
                continue
            t = time.time()
            fn(env)
            print("    (%s: %.1f s)" % (name, time.time() - t))
    print("train_mpi: ok (%.1f s)" % (time.time() - start))


if __name__ == "__main__":
    main()
