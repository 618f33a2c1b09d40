#!/usr/bin/python3
"""The emitted C on 32-bit targets: compiles with -Werror, and its stack use.

  targets.py --fixformer BIN [--configs N] [--jobs J]

For every target of TARGETS (Cortex-M0+, M4F, M7, M33, M55, rv32imafc,
armhf, i686), every model in models/ (f32; tiny also bf16 and int8, dates
int8) and N random configurations (random weight types), `fixformer emit
--with-main --target TRIPLE` (generic kernels) compiles with gcc -std=c99
-Wall -Wextra -Werror -pedantic: NAME.c at -O2 and -Os, NAME_main.c at -O2,
NAME_weights.c (--embed) at -O2 where WEIGHTS says.  Each NAME.c compile also writes -fstack-usage and
-fcallgraph-info=su: every frame must be static (no VLA, no alloca), the
call graph acyclic (no recursion), and the deepest chain from the public
entry points (NAME_*; the thread-pool tasks, run through the caller's pool,
count as calls of the functions handing them over) at most the header's
NAME_STACK_BYTES; the same for the other ISAs' kernels and clang on x86-64
and aarch64 (stack_only, STACK_MODELS).  NAME_OUTPUT_FLOATS / _BYTES are
checked against the runtime's output at T = MAX_SEQ, and the functions the
models call outside themselves: no double arithmetic, no libm beyond expf
(gcc's call graph, every target).  A missing toolchain
fails, naming the Debian packages (scripts/deps test installs them).  The
32-bit builds that run under qemu-user (armhf, i686) are checked against the
runtime by `emitted.py --check cross32`; the Cortex-M and rv32imafc
builds run bare-metal under qemu-system-* in tests/board.py.
"""
import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
from configs import random_config, write_description  # noqa: E402
from isas import compilers, isa_table, runs_on_host  # noqa: E402
from emitted import run  # noqa: E402

STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"]

# name, emit --target, compiler + flags, Debian packages (compiler, C library)
ARM = "arm-none-eabi-gcc"
ARM_PKG = "gcc-arm-none-eabi libnewlib-arm-none-eabi"
TARGETS = [
    ("cortex-m0plus", "thumbv6m-none-eabi", [ARM, "-mcpu=cortex-m0plus", "-mthumb", "-mfloat-abi=soft"], ARM_PKG),
    ("cortex-m4f", "thumbv7em-none-eabihf",
     [ARM, "-mcpu=cortex-m4", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv4-sp-d16"], ARM_PKG),
    ("cortex-m7", "thumbv7em-none-eabihf", [ARM, "-mcpu=cortex-m7", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-d16"],
     ARM_PKG),
    ("cortex-m33", "thumbv8m.main-none-eabihf",
     [ARM, "-mcpu=cortex-m33", "-mthumb", "-mfloat-abi=hard", "-mfpu=fpv5-sp-d16"], ARM_PKG),
    # gcc 12: -mcpu=cortex-m55 brings its FPU (+mve.fp); -mfpu=auto is the default
    ("cortex-m55", "thumbv8m.main-none-eabihf", [ARM, "-mcpu=cortex-m55", "-mthumb", "-mfloat-abi=hard"], ARM_PKG),
    ("rv32imafc", "riscv32-unknown-elf",
     ["riscv64-unknown-elf-gcc", "-march=rv32imafc", "-mabi=ilp32f", "--specs=picolibc.specs"],
     "gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf"),
    ("armhf", "arm-linux-gnueabihf", ["arm-linux-gnueabihf-gcc"], "gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"),
    ("i686", "i686-linux-gnu", ["i686-linux-gnu-gcc"], "gcc-i686-linux-gnu libc6-dev-i386-cross"),
]
# the stack of clang and of the other ISAs' kernels (NAME.c only, for
# STACK_BYTES) on STACK_MODELS: name, --isa, compiler, packages; the
# other ISAs' rows come from the table (stack_only)
STACK_ONLY = [("x86-64", "generic", ["gcc"], "gcc"), ("x86-64-clang", "generic", ["clang"], "clang")]
STACK_MODELS = ("tiny", "tiny_int8", "dates", "dates_int8")
# NAME_weights.c (--embed, megabytes of literals) is compiled for these
# models on these targets (None: all; random configurations: all;
# transformer_base: none)
SOME = ("cortex-m0plus", "cortex-m4f", "rv32imafc", "i686")
WEIGHTS = {"tiny": None, "dates": SOME, "tiny_bf16": SOME[::2], "tiny_int8": SOME[::2], "dates_int8": SOME[1:3],
           "llama_tiny": ("cortex-m4f",)}
OPTS = ("-O2", "-Os")  # NAME.c; the driver and weights at -O2


def stack_only(ff):
    """STACK_ONLY and every other ISA of the table: with gcc and its flags where it runs on this
    architecture (x86-64-avx2), else with the cross gcc of its first target (aarch64-neon)."""
    out = list(STACK_ONLY)
    for row in isa_table(ff)[1:]:
        cc, pkg = compilers(row)[0]
        where = "x86-64" if runs_on_host(row) else row.targets[0]
        out.append(("%s-%s" % (where, row.name), row.name, cc, pkg))
    return out


def check_toolchains(ff, tmp):
    """Every target's compiler and C library are there, or a failure naming the packages."""
    probe = os.path.join(tmp, "probe.c")
    with open(probe, "w") as f:
        f.write("#include <stdint.h>\n#include <stdio.h>\n#include <math.h>\n"
                "int main(void) { printf(\"%f\", (double)expf(1.0f)); return 0; }\n")
    missing = []
    for name, _, cc, pkg in TARGETS + [(n, None, cc, pkg) for n, _, cc, pkg in stack_only(ff)]:
        if shutil.which(cc[0]) is None:
            missing.append("%s: no %s (Debian packages: %s)" % (name, cc[0], pkg))
            continue
        p = subprocess.run(cc + STRICT + ["-c", probe, "-o", probe + "." + name + ".o"], capture_output=True,
                           text=True)
        if p.returncode != 0:
            missing.append("%s: %s cannot compile against its C library (Debian packages: %s): %s"
                           % (name, cc[0], pkg, p.stderr.strip()[:300]))
    if missing:
        raise RuntimeError("toolchains missing (run scripts/deps test):\n  " + "\n  ".join(missing))


def models(ff, tmp, n):
    """[(key, NAME, description, emit flags)]: models/ and n random configurations."""
    out = []
    for name in ("tiny", "llama_tiny", "dates", "transformer_base"):
        desc = os.path.join(ROOT, "models", name + ".lua")
        flags = []
        if name in WEIGHTS:  # random weights where the description names none
            w = os.path.join(ROOT, "models", name + ".safetensors")
            if not os.path.exists(w):
                w = os.path.join(tmp, name + ".safetensors")
                run([ff, "init", desc, "-o", w])
            flags = ["--weights", w]
        out.append((name, name, desc, flags))
        if name in ("tiny", "dates"):
            for dtype in ("bf16", "int8"):
                if name + "_" + dtype in WEIGHTS:
                    out.append((name + "_" + dtype, name, desc, flags + ["--dtype", dtype]))
    rng = random.Random(17)
    for i in range(n):
        cfg = random_config(rng, "tgt%02d" % i, force=i, dtype=True)
        d = os.path.join(tmp, "cfg_" + cfg["name"])
        os.mkdir(d)
        desc = write_description(cfg, d)
        w = os.path.join(d, "w.safetensors")
        run([ff, "init", desc, "-o", w])
        WEIGHTS[cfg["name"]] = None
        out.append((cfg["name"] + " (%s, %s)" % (cfg["arch"], cfg.get("dtype", "f32")), cfg["name"], desc,
                    ["--weights", w]))
    return out


# -fcallgraph-info=su: node: { title: "T" label: "NAME\nFILE:LINE:COL\nN bytes (static)" }
NODE = re.compile(r'^node: \{ title: "([^"]+)" label: "([^"\\]+)(?:\\n[^"\\]*)?(?:\\n(\d+) bytes \(([^)]+)\))?"')
EDGE = re.compile(r'^edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"')


def graph_gcc(ci_path):
    """-fcallgraph-info=su -> frames {f: bytes}, calls {f: [g]}, global functions; "__indirect_call" as a callee"""
    frame, calls, globals_ = {}, {}, set()
    with open(ci_path) as f:
        for line in f:
            m = NODE.match(line)
            if m and m.group(3) is not None:
                # "dynamic,bounded": pushes of outgoing arguments (i686), within the count
                if m.group(4) not in ("static", "dynamic,bounded"):
                    raise RuntimeError("%s: %s has a %s frame (a VLA or alloca)" % (ci_path, m.group(2), m.group(4)))
                frame[m.group(1)] = int(m.group(3))
                calls.setdefault(m.group(1), [])
                if ":" not in m.group(1):  # static functions are titled FILE:NAME
                    globals_.add(m.group(1))
            m = EDGE.match(line)
            if m:
                calls.setdefault(m.group(1), []).append(m.group(2))
    return frame, calls, globals_


def graph_clang(obj):
    """clang has no call graph: frames from -fstack-usage (+ the 8-byte return
    address x86-64's call pushes, which clang leaves out), calls and tail calls
    from objdump -d, globals from nm."""
    frame, calls = {}, {}
    with open(obj[:-2] + ".su") as f:
        for line in f:
            where, size, kind = line.rstrip("\n").split("\t")
            if kind != "static":
                raise RuntimeError("%s: %s has a %s frame (a VLA or alloca)" % (obj, where, kind))
            frame[where.split(":")[-1]] = int(size) + 8
    fn, branch = None, False
    for line in run(["objdump", "-dr", "--no-show-raw-insn", obj]).splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            fn = m.group(1)
            calls[fn] = []
            continue
        m = re.search(r"\sR_X86_64_PLT32\s+([A-Za-z_0-9.]+)-0x4$", line)
        if m and branch:  # a call of a global function: its relocation
            calls[fn].append(m.group(1))
        m = re.search(r"\t(call|jmp)\s+(\*|[0-9a-f]+ <([^>+]+)>$)", line)
        branch = bool(re.search(r"\t(call|jmp)\s", line))
        if m and fn:
            if m.group(2) == "*" and m.group(1) == "call":
                calls[fn].append("__indirect_call")
            elif m.group(3) and m.group(3) != fn:
                calls[fn].append(m.group(3))
    globals_ = {ln.split()[2] for ln in run(["nm", "--defined-only", obj]).splitlines() if ln.split()[1] == "T"}
    return frame, calls, globals_


def deepest(graph, name, where):
    """(bytes, chain) of the deepest call chain from NAME's public functions;
    raises on a cycle."""
    frame, calls, globals_ = graph
    called = {g for f in calls for g in calls[f]}
    # static functions nobody calls directly are the tasks handed to the pool
    # (compilers drop unused ones): calls of every function that calls indirectly
    tasks = [f for f in frame if f not in globals_ and f not in called]
    for f in calls:
        if "__indirect_call" in calls[f]:
            calls[f] = [g for g in calls[f] if g != "__indirect_call"] + tasks
    entries = [f for f in frame if f in globals_ and f.startswith(name + "_")]
    if not entries:
        raise RuntimeError("%s: no entry points %s_*" % (where, name))
    memo, active = {}, set()

    def depth(f):  # library functions (memset, expf, ...) count 0: their frames are the C library's
        if f not in frame:
            return 0, []
        if f in memo:
            return memo[f]
        if f in active:
            raise RuntimeError("%s: recursion through %s" % (where, f))
        active.add(f)
        best = max([depth(g) for g in calls.get(f, [])] + [(0, [])])
        active.discard(f)
        memo[f] = (frame[f] + best[0], [f.split(":")[-1]] + best[1])
        return memo[f]

    return max(depth(f) for f in entries)


def check_libcalls(libcalls):
    """No double arithmetic (Arm's __aeabi_d*, *2d; libgcc's *df*) and of the
    C library only expf, memcpy and memset; integer and single-precision
    helpers (the M0+ has no FPU) are fine."""
    for t, calls in sorted(libcalls.items()):
        bad = sorted(g for g in calls if (g.startswith("__") and (re.match(r"__aeabi_(c?d[a-z0-9]*|[a-z0-9]*2d)$", g)
                                                                  or "df" in g))
                     or (not g.startswith("__") and g not in ("expf", "memcpy", "memset")))
        if bad:
            raise RuntimeError("%s: the models call %s (double arithmetic or libm beyond expf)" % (t, " ".join(bad)))


def header_macro(h, uname, macro):
    with open(h) as f:
        m = re.search(r"#define %s_%s (\d+)" % (uname, macro), f.read())
    if not m:
        raise RuntimeError("%s: no %s_%s" % (h, uname, macro))
    return int(m.group(1))


def check_output_macros(ff, tmp, ms):
    """NAME_OUTPUT_FLOATS / _BYTES: the runtime's output of one sequence of MAX_SEQ tokens."""
    for key, name, desc, flags in ms:
        if key not in ("tiny", "llama_tiny", "dates"):
            continue
        h = os.path.join(tmp, key, "cortex-m4f", name + ".h")
        seq = header_macro(h, name.upper(), "MAX_SEQ")
        ids = os.path.join(tmp, key, "ids.npy")
        np.save(ids, np.ones((1, seq), dtype=np.int32))
        out = os.path.join(tmp, key, "out.npy")
        tgt = ["--target-input", ids] if key == "dates" else []
        run([ff, "run", desc, "--input", ids, "--output", out, "--engine", "runtime"] + tgt +
            [f for f in flags if f != "--embed"])
        floats = np.load(out).size
        if (header_macro(h, name.upper(), "OUTPUT_FLOATS"), header_macro(h, name.upper(), "OUTPUT_BYTES")) != \
                (floats, 4 * floats):
            raise RuntimeError("%s: %s_OUTPUT_FLOATS / _BYTES are not the runtime's %d floats at T = %d"
                               % (key, name.upper(), floats, seq))
        print("%s: %s_OUTPUT_FLOATS = %d, the runtime's output at T = MAX_SEQ = %d" % (key, name.upper(), floats, seq))


def build(ff, tmp, model, target):
    """Emits for one target, compiles, measures: [(opt, stack bytes, chain)], the bound, weights compiled."""
    key, name, desc, flags = model
    tname, triple, isa, cc, full = target
    policy = WEIGHTS.get(name if key.startswith("tgt") else key, ())
    embed = full and (policy is None or tname in policy)
    d = os.path.join(tmp, key.split()[0], tname)
    run([ff, "emit", desc, "-o", d, "--with-main", "--isa", isa] + flags + (["--embed"] if embed else [])
        + (["--target", triple] if triple else []))
    src = os.path.join(d, name + ".c")
    bound = header_macro(os.path.join(d, name + ".h"), name.upper(), "STACK_BYTES")
    if full:
        run(cc + STRICT + ["-O2", "-c", os.path.join(d, name + "_main.c"), "-o", os.path.join(d, "main.o")])
    if embed:
        run(cc + STRICT + ["-O2", "-c", os.path.join(d, name + "_weights.c"), "-o", os.path.join(d, "weights.o")])
    stacks, libcalls = [], set()
    for opt in OPTS:
        obj = os.path.join(d, "model%s.o" % opt)
        if cc[0] == "clang":
            run(cc + STRICT + [opt, "-fstack-usage", "-c", src, "-o", obj], cwd=d)
            used, chain = deepest(graph_clang(obj), name, obj)
        else:
            run(cc + STRICT + [opt, "-fstack-usage", "-fcallgraph-info=su", "-c", src, "-o", obj], cwd=d)
            graph = graph_gcc(obj[:-2] + ".ci")
            libcalls.update(g for f in graph[1] for g in graph[1][f] if g not in graph[0] and g != "__indirect_call")
            used, chain = deepest(graph, name, obj)
        if used > bound:
            raise RuntimeError("%s on %s %s: the deepest call chain uses %d bytes of stack, above %s_STACK_BYTES = "
                               "%d: %s" % (key, tname, opt, used, name.upper(), bound, " > ".join(chain)))
        stacks.append((opt, used, chain))
    return stacks, bound, embed, libcalls


def targets(ff):
    """[(name, emit --target, --isa, compiler + flags, compile the driver and weights too)]"""
    out = [(name, triple, "generic", cc, True) for name, triple, cc, _ in TARGETS]
    return out + [(name, None, isa, cc, False) for name, isa, cc, _ in stack_only(ff)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--configs", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    ff = os.path.abspath(args.fixformer)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            check_toolchains(ff, tmp)
            ms = models(ff, tmp, args.configs)
            for key, _, _, _ in ms:
                os.makedirs(os.path.join(tmp, key.split()[0]), exist_ok=True)
            work = [(m, t) for m in ms for t in targets(ff) if t[4] or m[0] in STACK_MODELS]
            with ThreadPoolExecutor(args.jobs) as pool:
                results = list(pool.map(lambda mt: build(ff, tmp, *mt), work))
            worst = {}
            libcalls = {}
            for (m, t), (stacks, bound, embed, calls) in zip(work, results):
                libcalls.setdefault(t[0], set()).update(calls)
                print("%-30s %-18s %s; stack %s (STACK_BYTES %d)"
                      % (m[0], t[0], ("-Werror ok" + (" (+weights)" if embed else "")) if t[4] else "--isa " + t[2],
                         ", ".join("%s %d" % (o, b) for o, b, _ in stacks), bound), flush=True)
                for o, b, chain in stacks:
                    k = (t[0], "bf16/int8" if "int8" in m[0] or "bf16" in m[0] else "f32")
                    if b > worst.get(k, (0,))[0]:
                        worst[k] = (b, m[0] + " " + o, chain)
            check_output_macros(ff, tmp, ms)
            print("deepest stack per target (bytes, model, chain):")
            for (t, dt), (b, key, chain) in sorted(worst.items()):
                print("  %-18s %-9s %5d  %s: %s" % (t, dt, b, key, " > ".join(chain)))
            print("C library and compiler runtime functions the models call (gcc's call graph, every model):")
            for t in sorted(libcalls):
                if libcalls[t]:
                    print("  %-18s %s" % (t, " ".join(sorted(libcalls[t]))))
            check_libcalls(libcalls)
        except RuntimeError as e:
            print("FAILED: %s" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
