#!/usr/bin/python3
"""The bare-metal examples on qemu's boards: emitted models built into firmware
through CMake, as a user cross-builds them: the package installed from the
build tree, `find_package(fixformer)` in a build configured with its toolchain
file (the generator only), fixformer_add_model emitting for the core;
examples/mps2-an386 (newlib) under qemu-system-arm on mps2-an386 (Cortex-M4F,
the default), mps2-an500 (Cortex-M7), mps2-an505 (Cortex-M33), mps3-an547
(Cortex-M55), examples/riscv32-virt (picolibc) under qemu-system-riscv32 on
virt (rv32imafc); run with semihosting and checked against the host.
  - models/tiny.lua (weights of `fixformer init`): the logits of one forward
    pass over a padded batch of two, per weight type, against `fixformer run`
    (the runtime, the reference): max|board - ref| / max|ref| <= 1e-5.
  - models/dates.lua: held-out dates (tests/dates.py's generator) translated on
    the board by greedy decoding, per weight type: the same ids as
    `fixformer generate --engine runtime --ids`; how many are right is printed.
  - every firmware links no double-precision routine (__aeabi_d*, __aeabi_f2d,
    libgcc's *df*) and of the C library only what expf alone pulls in (the
    example's expf_probe, linked the same way) and memcpy / memset;
    --allow-double reports instead of failing.
  - each firmware's inputs.h is written by `fixformer tokenize --c-header` (tiny:
    the ids as given; dates: the texts through the model's vocabulary).
  - a firmware whose call fails exits qemu non-zero (a token id out of range).
  - prints flash (text + data), RAM (data + bss, the stack not included) and the
    deepest stack use measured on the board (the start-up code paints the free
    RAM) per model and weight type, and the instructions per token: the board's
    under `-icount shift=0` (one instruction a nanosecond: 1e9 / hz a tick of
    the timer the firmware reads), the host's with valgrind (callgrind, the same
    main.c built natively) when valgrind is installed.  Report only: no limit is
    asserted on them.

  board.py --fixformer BIN --build-dir DIR [--machine mps2-an386] [--count 50]
           [--dtypes f32,bf16,int8] [--allow-double] [--no-valgrind] [--keep DIR]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "lib"))
from tools import need  # noqa: E402

ROOT = os.path.join(HERE, "..")
EXAMPLES = os.path.join(ROOT, "examples")
MODELS = os.path.join(ROOT, "models")
ARM = [("arm-none-eabi-gcc", "gcc-arm-none-eabi, with libnewlib-arm-none-eabi"), ("qemu-system-arm", "qemu-system-arm")]
RV32 = [("riscv64-unknown-elf-gcc", "gcc-riscv64-unknown-elf, with picolibc-riscv64-unknown-elf"),
        ("qemu-system-riscv32", "qemu-system-misc")]
SEMIHOSTING = ["-nographic", "-semihosting-config", "enable=on,target=native", "-icount", "shift=0"]
# qemu's machine: its core, the package's toolchain file, the example, qemu's command, the tools (Debian packages)
MACHINES = {"mps2-an386": ("Cortex-M4F", "cortex-m4", "mps2-an386", ["qemu-system-arm", "-M", "mps2-an386"], ARM),
            "mps2-an500": ("Cortex-M7", "cortex-m7", "mps2-an386", ["qemu-system-arm", "-M", "mps2-an500"], ARM),
            "mps2-an505": ("Cortex-M33", "cortex-m33", "mps2-an386", ["qemu-system-arm", "-M", "mps2-an505"], ARM),
            "mps3-an547": ("Cortex-M55", "cortex-m55", "mps2-an386", ["qemu-system-arm", "-M", "mps3-an547"], ARM),
            "virt": ("rv32imafc", "riscv32-unknown-elf", "riscv32-virt",
                     ["qemu-system-riscv32", "-M", "virt", "-bios", "none"], RV32)}
TOL = 1e-5                      # generated code against the runtime, as everywhere in the suite
MAX_NEW = 16                    # as tests/dates.py
TINY_BATCH = [[5, 17, 42, 99, 7, 64, 3, 120, 1, 0, 88, 33], [9, 8, 7, 6, 5, 4, 3]]  # the second is padded
# the double-precision routines of libgcc (soft-float double on a single-precision FPU)
DOUBLE_SYM = re.compile(r"^__aeabi_(d[a-z0-9]+|[a-z0-9]+2d)$|^__[a-z]+df[a-z0-9]*$")


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d\n%s%s" % (" ".join(cmd), p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return p


class Board:
    """One machine's builds: the example configured for its toolchain file against the installed package."""

    def __init__(self, args, tmp, prefix):
        self.args, self.tmp, self.prefix = args, tmp, prefix
        self.core, toolchain, example, self.qemu_cmd, tools = MACHINES[args.machine]
        self.toolchain = os.path.join(prefix, "lib", "cmake", "fixformer", "toolchains", toolchain + ".cmake")
        self.example = os.path.join(EXAMPLES, example)
        self.cross = tools[0][0][:-len("gcc")]  # arm-none-eabi-gcc -> arm-none-eabi-
        self.probe_members = None
        self.probe_dir = None

    def build(self, model, weights, dtype, inputs):
        """cmake with the toolchain file, then a build: (the ELF, the emitted files' folder).  One build
        folder a model, configured again for each weight type and inputs."""
        b = os.path.join(self.tmp, "build_" + os.path.basename(model)[:-4])
        defs = ["CMAKE_TOOLCHAIN_FILE=" + self.toolchain, "CMAKE_PREFIX_PATH=" + self.prefix, "MODEL=" + model,
                "WEIGHTS=" + weights, "DTYPE=" + dtype, "INPUTS=" + inputs, "MAX_NEW=%d" % MAX_NEW, "FF_WERROR=ON"]
        if self.example.endswith("mps2-an386"):
            defs.append("BOARD=" + self.args.machine)
        run(["cmake", "-S", self.example, "-B", b] + ["-D" + d for d in defs])
        run(["cmake", "--build", b])
        self.probe_dir = self.probe_dir or b
        name = os.path.basename(model)[:-4]
        return os.path.join(b, name + ".elf"), os.path.join(b, "model.fixformer", "emit")

    def build_host(self, name, gen, inputs):
        """The same main.c and model built natively (host.c), for valgrind."""
        exe = os.path.join(gen, "..", name + "_host")
        common = os.path.join(EXAMPLES, "mps2-an386")
        run(["cc", "-O2", "-g", "-std=c99", "-DMODEL=" + name, "-DMODEL_UP=" + name.upper(), '-DMODEL_H="%s.h"' % name,
             "-DINPUT_MAX_NEW=%d" % MAX_NEW, "-I" + gen, "-I" + inputs, "-I" + common, "-o", exe, os.path.join(common, "host.c"),
             os.path.join(common, "main.c"), os.path.join(gen, name + ".c"), os.path.join(gen, name + "_weights.c"),
             "-lm"])
        return exe

    def qemu(self, elf, expect_ok=True):
        cmd = self.qemu_cmd + SEMIHOSTING + ["-kernel", elf]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        out = p.stderr.replace("\r\n", "\n")  # semihosting writes to qemu's stderr
        if expect_ok and (p.returncode != 0 or not out.endswith("done\n")):
            raise RuntimeError("qemu: exit %d\n%s%s" % (p.returncode, p.stdout[-500:], out[-500:]))
        return p.returncode, out

    def sizes(self, elf):
        """(flash, RAM): text + data, data + bss."""
        line = run([self.cross + "size", elf]).stdout.splitlines()[1].split()
        text, data, bss = int(line[0]), int(line[1]), int(line[2])
        return text + data, data + bss

    def archive_members(self, elf):
        """{archive: set of members} the link pulled in, from the map beside the ELF."""
        got = {}
        for lib, member in re.findall(r"(lib\w+\.a)\(([^)]+)\)", open(elf[:-len(".elf")] + ".map").read()):
            got.setdefault(lib, set()).add(member)
        return got

    def probe(self):
        """What expf alone pulls from the C library: the example's expf_probe, linked the way the firmware is."""
        if self.probe_members is None:
            run(["cmake", "--build", self.probe_dir, "--target", "expf_probe"])
            elf = os.path.join(self.probe_dir, "expf_probe.elf")
            self.probe_members = self.archive_members(elf)
            doubles = self.double_symbols(elf)
            if doubles:
                raise RuntimeError("the C library's expf alone pulls in double routines: %s" % " ".join(doubles))
        return self.probe_members

    def double_symbols(self, elf):
        return sorted(s.split()[-1] for s in run([self.cross + "nm", elf]).stdout.splitlines()
                      if DOUBLE_SYM.match(s.split()[-1]))

    def check_link(self, name, elf):
        """No double routine, and of libm / libc only expf's members (plus memcpy / memset): 0 or 1."""
        allowed = self.probe()
        got = self.archive_members(elf)
        doubles = self.double_symbols(elf)
        extra_m = sorted(got.get("libm.a", set()) - allowed.get("libm.a", set()))
        libc = [k for k in got if k.startswith("libc")]
        extra_c = sorted(m for k in libc for m in got[k] - allowed.get(k, set())
                         if not re.search(r"(^|[-_])mem(cpy|set|move)([-_.]|$)", m))  # newlib's, picolibc's
        bad = bool(doubles or extra_m or extra_c)
        if not bad:
            expf = sorted(m for k in got if k == "libm.a" or k.startswith("libc") for m in got[k] & allowed.get(k, set()))
            print("%-10s link: no double routine; of libm only expf's %s" % (name, " ".join(expf)))
            return 0
        verdict = ("reported only (--allow-double)" if self.args.allow_double else
                   "FAIL: a %s firmware must use no double arithmetic and of libm only expf" % self.core)
        print("%-10s link: %s" % (name, verdict))
        if doubles:
            print("   double-precision routines: %s" % " ".join(doubles))
        if extra_m:
            print("   libm members beyond expf's: %s" % " ".join(extra_m))
        if extra_c:
            print("   libc members beyond memcpy/memset and expf's: %s" % " ".join(extra_c))
        return 0 if self.args.allow_double else 1

    def host_instructions(self, name, gen, inputs, function):
        """Instructions executed inside `function` on the host (callgrind), or None without valgrind."""
        if self.args.no_valgrind or not shutil.which("valgrind"):
            return None
        exe = self.build_host(name, gen, inputs)
        out = exe + ".callgrind"
        p = run(["valgrind", "--tool=callgrind", "--toggle-collect=" + function, "--callgrind-out-file=" + out, exe])
        m = re.search(r"Collected : (\d+)", p.stderr)
        return int(m.group(1)) if m else None


def parse_ticks(stdout, what):
    """(ticks, steps, hz) of the board's `ticks WHAT` line."""
    m = re.search(r"^ticks %s (\d+) steps (\d+) hz (\d+)$" % what, stdout, re.M)
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def stack_used(stdout):
    return int(re.search(r"^stack (\d+)$", stdout, re.M).group(1))


def per_token(ticks, steps, hz):
    """Instructions a step: -icount shift=0 makes an instruction one nanosecond of the board's clock."""
    return ticks * 1e9 / hz / max(steps, 1)


def check_tiny(args, board, tmp, dtype, table, ipt):
    model = os.path.join(MODELS, "tiny.lua")
    weights = os.path.join(tmp, "tiny.safetensors")
    if not os.path.exists(weights):
        run([args.fixformer, "init", model, "-o", weights])
    d = os.path.join(tmp, "tiny_" + dtype)
    os.makedirs(d)
    T = max(len(s) for s in TINY_BATCH)
    ids = np.zeros((len(TINY_BATCH), T), np.int32)
    for b, s in enumerate(TINY_BATCH):
        ids[b, :len(s)] = s
    lengths = np.array([len(s) for s in TINY_BATCH], np.int32)
    # the board's inputs.h, written by the command (the ids as given, a padded batch)
    run([args.fixformer, "tokenize", model, "--tokens", ", ".join(" ".join(map(str, s)) for s in TINY_BATCH),
         "--c-header", "input", "-o", os.path.join(d, "inputs.h")])
    np.save(os.path.join(d, "ids.npy"), ids)
    np.save(os.path.join(d, "lengths.npy"), lengths)
    run([args.fixformer, "run", model, "--weights", weights, "--input", os.path.join(d, "ids.npy"), "--lengths",
         os.path.join(d, "lengths.npy"), "--output", os.path.join(d, "ref.npy"), "--dtype", dtype, "--engine", "runtime"])
    ref = np.load(os.path.join(d, "ref.npy"))
    elf, gen = board.build(model, weights, dtype, d)
    _, stdout = board.qemu(elf)
    rows = [line.split()[1:] for line in stdout.splitlines() if line.startswith("out ")]
    got = np.array([[int(h, 16) for h in r] for r in rows], np.uint32).view(np.float32).reshape(ref.shape)
    valid = np.arange(T)[None, :] < lengths[:, None]   # padded rows carry no meaning
    err = float(np.abs(got - ref)[valid].max() / np.abs(ref[valid]).max())
    ok = err <= TOL
    print("tiny %-4s board logits [%d, %d, %d] against `fixformer run`: max|board - ref| / max|ref| = %.3g (<= %g) %s"
          % ((dtype,) + ref.shape + (err, TOL, "ok" if ok else "FAIL")))
    failed = (not ok) + board.check_link("tiny " + dtype, elf)
    table.append(("tiny", dtype) + board.sizes(elf) + (stack_used(stdout),))
    ticks, steps, hz = parse_ticks(stdout, "forward")
    host = board.host_instructions("tiny", gen, d, "tiny_run")
    ipt.append(("tiny", dtype, "forward, T = %d, batch %d" % (T, len(TINY_BATCH)), per_token(ticks, steps, hz),
                host / steps if host else None))
    if dtype == "f32":  # a failing call must fail the run: a token id past the vocabulary
        with open(os.path.join(d, "inputs.h")) as f:  # (tokenize refuses such an id: edited in)
            bad = re.sub(r"(input_tokens\[\d+\] = \{\n  )5,", r"\g<1>500,", f.read())
        os.makedirs(os.path.join(d, "bad"))
        with open(os.path.join(d, "bad", "inputs.h"), "w") as f:
            f.write(bad)
        rc, out = board.qemu(board.build(model, weights, dtype, os.path.join(d, "bad"))[0], expect_ok=False)
        ok = rc != 0 and "error: run returned -5" in out
        print("tiny bad token: qemu exit %d, %r %s" % (rc, out.strip(), "ok" if ok else "FAIL"))
        failed += not ok
    return failed


def dates_inputs(count):
    """count held-out dates (tests/dates.py's generator and seed): [(text, expected ISO)]."""
    sys.path.insert(0, os.path.join(HERE, "lib"))
    import dates_ref
    return dates_ref.make_dates(count, dates_ref.HELD_OUT_SEED)


def check_dates(args, board, tmp, dtype, pairs, table, ipt):
    model = os.path.join(MODELS, "dates.lua")
    vocab = json.load(open(os.path.join(MODELS, "dates.vocab.json")))
    d = os.path.join(tmp, "dates_" + dtype)
    os.makedirs(d)
    lines = os.path.join(d, "lines.txt")
    with open(lines, "w") as f:
        f.writelines(t + "\n" for t, _ in pairs)
    # the board's inputs.h: the dates in the model's ids, by the command (-DMAX_NEW=16 bounds the decoding)
    run([args.fixformer, "tokenize", model, "--lines", lines, "--c-header", "input", "-o", os.path.join(d, "inputs.h")])
    host = run([args.fixformer, "generate", model, "--lines", lines, "--ids", "--max-new", str(MAX_NEW), "--engine",
                "runtime", "--dtype", dtype]).stdout.splitlines()
    elf, gen = board.build(model, os.path.join(MODELS, "dates.safetensors"), dtype, d)
    _, stdout = board.qemu(elf)
    got = [line[4:] for line in stdout.splitlines() if line.startswith("ids ")]
    host_ids = [h.split("\t")[0] for h in host]
    same = sum(g == h for g, h in zip(got, host_ids))
    inv = {i: t for i, t in enumerate(vocab["tokens"])}
    texts = ["".join(inv[int(i)] for i in g.split() if int(i) > 3) for g in got]
    right = sum(t == e for t, (_, e) in zip(texts, pairs))
    ok = len(got) == len(pairs) and same == len(pairs)
    print("dates %-4s board: %d/%d the same ids as `fixformer generate --engine runtime`, %d/%d right %s"
          % (dtype, same, len(pairs), right, len(pairs), "ok" if ok else "FAIL"))
    for (t, _), g, h in list(zip(pairs, got, host_ids))[:len(pairs)]:
        if g != h:
            print("   %r: board %s, host %s" % (t, g, h))
    failed = (not ok) + board.check_link("dates " + dtype, elf)
    table.append(("dates", dtype) + board.sizes(elf) + (stack_used(stdout),))
    ticks, steps, hz = parse_ticks(stdout, "decode")
    host_n = board.host_instructions("dates", gen, d, "dates_decode")
    ipt.append(("dates", dtype, "decode step (%d steps)" % steps, per_token(ticks, steps, hz),
                host_n / steps if host_n else None))
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--build-dir", required=True, help="fixformer's build tree, to install the package from")
    ap.add_argument("--machine", default="mps2-an386", choices=sorted(MACHINES),
                    help="qemu's board: " + ", ".join("%s (%s)" % (m, MACHINES[m][0]) for m in sorted(MACHINES)))
    ap.add_argument("--count", type=int, default=50, help="held-out dates to translate on the board")
    ap.add_argument("--dtypes", default="f32,bf16,int8")
    ap.add_argument("--allow-double", action="store_true",
                    help="report double routines and libm beyond expf instead of failing")
    ap.add_argument("--keep", help="build here and keep it (default: a temporary directory)")
    ap.add_argument("--no-valgrind", action="store_true",
                    help="no host instruction counts (the same on every board: board_mps2 prints them)")
    args = ap.parse_args()
    try:
        need([("cmake", "cmake")] + MACHINES[args.machine][4])
    except RuntimeError as e:
        print("FAILED: %s" % e)
        return 1
    t0 = time.time()
    tmp = args.keep or tempfile.mkdtemp(prefix="board_")
    if args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    failed, table, ipt = 0, [], []
    try:
        prefix = os.path.join(tmp, "prefix")  # the package as a user installs it
        run(["cmake", "--install", args.build_dir, "--prefix", prefix])
        board = Board(args, tmp, prefix)
        print("%s (%s): examples/%s through CMake, %s" % (args.machine, board.core, os.path.basename(board.example),
                                                         os.path.basename(board.toolchain)))
        pairs = dates_inputs(args.count)
        for dtype in args.dtypes.split(","):
            failed += check_tiny(args, board, tmp, dtype, table, ipt)
        for dtype in args.dtypes.split(","):
            failed += check_dates(args, board, tmp, dtype, pairs, table, ipt)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print("\n| model | weights | flash (text + data) | RAM (data + bss) | stack used |\n|---|---|---:|---:|---:|")
    for model, dtype, flash, ram, stack in table:
        print("| %s | %s | %s B (%.0f KB) | %s B (%.0f KB) | %s B |" % (
            model, dtype, format(flash, ","), flash / 1024, format(ram, ","), ram / 1024, format(stack, ",")))
    print("\n| model | weights | measured over | board instructions / token | host (x86-64) |\n|---|---|---|---:|---:|")
    for model, dtype, what, b, h in ipt:
        print("| %s | %s | %s | %s | %s |" % (model, dtype, what, format(int(round(b)), ","),
                                            format(int(round(h)), ",") if h else "-"))
    print("\n%s in %.0f s" % ("FAIL" if failed else "ok", time.time() - t0))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
