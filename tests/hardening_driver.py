#!/usr/bin/python3
"""generate / run / bench input handling, the --with-main driver and emit's
sizes and output folder against hostile input (issue 22).  One case per
fault; each fails on the code before the fix:

  generate_lines_last_line_without_newline
      generate --lines on a file whose last line has no '\\n' (and one ending
      in '\\r'): the line was NUL-terminated one byte past the buffer; valgrind
      (plain build) or ASan (sanitizer build) sees it.
  driver_generate_max_seq_2_20
      the --with-main driver of a model with max_seq 2^20 decodes --tokens
      under an 8 MiB stack: its id arrays were 8 MiB on the stack (SIGSEGV).
  generate_logits_huge_max_new, run_tokens_longer_than_max_seq,
  bench_batch_too_large, driver_length_above_max_seq, driver_flag_integers
      the range checks come before the buffers they size: the max_seq message,
      not "out of memory" (an address-space limit makes that sure in the plain
      build), and flags that wrapped through atoi are refused.
  emit_32bit_target_sizes
      emit --target for a 32-bit architecture refuses a model whose state,
      weights or output pass 2^31 bytes with one line naming which, writes
      nothing, and emits the same model for x86_64.
  driver_logits_overflow_32bit
      a model whose P x VOCAB logits pass 2^30 floats (state and weights small)
      built for i686 and run under qemu-i386 refuses the prompt with one line,
      where the 32-bit product wrapped and the decode wrote through a short
      buffer.
  emit_failure_leaves_no_folder
      emit -o NEWDIR whose files fail (a file-size limit) leaves no NEWDIR;
      an existing folder is kept.

  hardening_driver.py --fixformer BIN [--sanitized] [--case NAME]
"""
import argparse
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATES = os.path.join(ROOT, "models", "dates.lua")
TINY = os.path.join(ROOT, "models", "tiny.lua")
VALGRIND = ["valgrind", "--error-exitcode=99", "-q"]
AS_LIMIT = 2 << 30  # the plain build's address space in the memory cases: a buffer sized before its check fails


class Failed(Exception):
    pass


def run(cmd, ok=True, limit_as=None, stack=None, **kw):
    def limits():
        if limit_as:
            resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))
        if stack:
            resource.setrlimit(resource.RLIMIT_STACK, (stack, stack))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       preexec_fn=limits if (limit_as or stack) else None, **kw)
    if ok and p.returncode != 0:
        raise Failed("%s: exit %d: %s" % (" ".join(cmd)[:300], p.returncode, p.stderr.strip()[-2000:]))
    return p


def refused(p, prefix, *words, status=1):
    """exit status (1: bad input, 2: a command line out of range) and one line on stderr starting with
    prefix and holding each word"""
    lines = p.stderr.splitlines()
    if p.returncode != status or len(lines) != 1 or not lines[0].startswith(prefix) or \
            not all(w in lines[0] for w in words):
        raise Failed("expected exit %d and one line '%s...' with %s on stderr, got exit %d and %r"
                     % (status, prefix, words, p.returncode, p.stderr[-1500:]))
    return lines[0]


def describe(path, **keys):
    with open(path, "w") as f:
        f.write("return {\n")
        for k, v in keys.items():
            f.write("  %s = %s,\n" % (k, ('"%s"' % v) if isinstance(v, str) else str(v).lower()))
        f.write("}\n")
    return path


class Cases:
    def __init__(self, ff, tmp, sanitized):
        self.ff, self.tmp, self.sanitized = ff, tmp, sanitized
        self.limit = None if sanitized else AS_LIMIT  # ASan reserves terabytes of shadow: no RLIMIT_AS there

    def dir(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        return d

    # ---- 1: generate --lines ----------------------------------------------------

    def generate_lines_last_line_without_newline(self):
        d = self.dir("lines")
        want = run([self.ff, "generate", DATES, "--text", "March 5, 1999", "--engine", "runtime"]).stdout
        for name, text in (("plain", b"March 5, 1999"), ("cr", b"March 5, 1999\r"),
                           ("two", b"March 5, 1999\nMarch 5, 1999")):
            path = os.path.join(d, name + ".txt")
            with open(path, "wb") as f:
                f.write(text)
            cmd = [self.ff, "generate", DATES, "--lines", path, "--engine", "runtime"]
            if not self.sanitized and shutil.which("valgrind"):
                cmd = VALGRIND + cmd
            p = run(cmd, ok=False)
            if p.returncode != 0:
                raise Failed("--lines %r: exit %d: %s" % (text, p.returncode, p.stderr[-2500:]))
            if p.stdout != want * (2 if name == "two" else 1):
                raise Failed("--lines %r: printed %r, --text prints %r" % (text, p.stdout, want))
        return "3 files without a final newline decoded, %s-clean" % ("ASan" if self.sanitized else "valgrind")

    # ---- 5: the driver's stack ----------------------------------------------------

    def driver_generate_max_seq_2_20(self):
        d = self.dir("maxseq")
        model = describe(os.path.join(d, "longseq.lua"), name="longseq", arch="decoder-only", d_model=4, heads=1, d_ff=4,
                         layers=1, vocab=16, max_seq=1 << 20)
        w = os.path.join(d, "longseq.safetensors")
        run([self.ff, "init", model, "-o", w])
        run([self.ff, "emit", model, "-o", d, "--weights", w, "--with-main"])
        exe = os.path.join(d, "longseq")
        run(["cc", "-O1", "-std=c99", "-o", exe, os.path.join(d, "longseq.c"), os.path.join(d, "longseq_main.c"),
             "-lm"])
        # the CLI's greedy ids on the same weights are the reference
        want = run([self.ff, "generate", model, "--weights", w, "--tokens", "3 1 4 1 5", "--max-new", "6",
                    "--engine", "runtime"]).stdout.split()
        p = run([exe, "--weights", os.path.join(d, "longseq.weights"), "--tokens", "3 1 4 1 5", "--max-new", "6"],
                ok=False, stack=8 << 20)
        if p.returncode != 0:
            raise Failed("max_seq 2^20 driver, --tokens under an 8 MiB stack: exit %d (%s): %s"
                         % (p.returncode, signal.Signals(-p.returncode).name if p.returncode < 0 else "",
                            p.stderr[-1000:]))
        if p.stdout.split() != want:
            raise Failed("max_seq 2^20 driver: ids %s, the runtime's %s" % (p.stdout.split(), want))
        return "ids %s under an 8 MiB stack, as the runtime" % " ".join(want)

    # ---- 13: range checks before allocations ------------------------------------------

    def generate_logits_huge_max_new(self):
        out = os.path.join(self.dir("logits"), "logits.npy")
        msgs = []
        for extra in ([], ["--logits", out]):
            p = run([self.ff, "generate", DATES, "--text", "March 5, 1999", "--max-new", str(1 << 30),
                     "--engine", "runtime"] + extra, ok=False, limit_as=self.limit)
            msgs.append(refused(p, "fixformer generate: ", "do not fit in max_seq"))
        if msgs[0] != msgs[1] or os.path.exists(out):
            raise Failed("--logits: %r, without: %r (or %s written)" % (msgs[1], msgs[0], out))
        return msgs[1]

    def run_tokens_longer_than_max_seq(self):
        # 20001 sequences, the first of 40000 ids: a batch of 3.2 GB if it is sized before the check
        tokens = " ".join(["1"] * 40000) + ",1" * 20000
        exe, blob = self._tiny_driver()  # (its safetensors: run reads them only after the input checks)
        w = os.path.join(os.path.dirname(exe), "tiny.safetensors")
        p = run([self.ff, "run", TINY, "--weights", w, "--tokens", tokens], ok=False, limit_as=self.limit)
        return refused(p, "fixformer run: ", "--tokens", "40000", "max_seq")

    def bench_batch_too_large(self):
        lines = []
        cases = [(1 << 30, ["--batch", str(1 << 24)], 2), (1 << 24, ["memory"], 1)]  # the cap; 512 GB of buffers
        for batch, words, status in cases[:1] if self.sanitized else cases:  # (ASan would map the 512 GB)
            p = run([self.ff, "bench", TINY, "--batch", str(batch), "--seq", "64", "--engine", "runtime",
                     "--iters", "1"], ok=False, limit_as=self.limit)
            lines.append(refused(p, "fixformer bench: ", *words, status=status))
            if "load weights" in p.stdout:
                raise Failed("bench --batch %d: loaded the weights before refusing the batch" % batch)
        return " / ".join(lines)

    def _tiny_driver(self):
        if not hasattr(self, "tiny_exe"):
            d = self.dir("tiny")
            w = os.path.join(d, "tiny.safetensors")
            run([self.ff, "init", TINY, "-o", w])
            run([self.ff, "emit", TINY, "-o", d, "--weights", w, "--with-main"])
            self.tiny_exe = os.path.join(d, "tiny")
            run(["cc", "-O1", "-std=c99", "-o", self.tiny_exe, os.path.join(d, "tiny.c"),
                 os.path.join(d, "tiny_main.c"), "-lm"])
            self.tiny_blob = os.path.join(d, "tiny.weights")
        return self.tiny_exe, self.tiny_blob

    def driver_length_above_max_seq(self):
        exe, blob = self._tiny_driver()
        d = os.path.dirname(exe)
        inp, out = os.path.join(d, "long.npy"), os.path.join(d, "out.npy")
        np.save(inp, np.ones((3, 65), np.int32))  # tiny: max_seq 64
        p = run([exe, "--weights", blob, "--input", inp, "--output", out], ok=False)
        line = refused(p, "tiny: ", "length 65", "64")
        if os.path.exists(out):
            raise Failed("refused, but %s was written" % out)
        return line

    def driver_flag_integers(self):
        d = self.dir("flags")
        dec = describe(os.path.join(d, "dec.lua"), name="dec", arch="decoder-only", d_model=8, heads=2, d_ff=8,
                       layers=1, vocab=16, max_seq=32, positional="learned")
        w = os.path.join(d, "dec.safetensors")
        run([self.ff, "init", dec, "-o", w])
        run([self.ff, "emit", dec, "-o", d, "--weights", w, "--with-main"])
        exe = os.path.join(d, "dec")
        run(["cc", "-O1", "-std=c99", "-o", exe, os.path.join(d, "dec.c"), os.path.join(d, "dec_main.c"), "-lm"])
        base = [exe, "--weights", os.path.join(d, "dec.weights"), "--tokens", "1 2 3"]
        run(base + ["--max-new", "2"])
        lines = []
        # 2^32 + 1 was 1 through atoi; 1x and an empty value were 1 and 0
        for flag, value in (("--max-new", "4294967297"), ("--max-new", "1x"), ("--max-new", "30"),
                            ("--threads", "4294967297"), ("--bos", "4294967297"), ("--eos", "16")):
            p = run(base + [flag, value], ok=False)
            lines.append(refused(p, "dec: ", flag))
        return "%d flags refused, e.g. %s" % (len(lines), lines[0])

    # ---- 15: sizes on 32-bit targets ----------------------------------------------------

    def emit_32bit_target_sizes(self):
        d = self.dir("sizes")
        big = {  # each one size above 2^32 bytes, the others small
            "state": dict(arch="decoder-only", d_model=1024, heads=8, d_ff=1024, layers=4, vocab=16, max_seq=131072),
            "weights": dict(arch="encoder", d_model=4096, heads=8, d_ff=16384, layers=8),
            "output": dict(arch="encoder", d_model=8, heads=1, d_ff=8, layers=1, vocab=1 << 20, max_seq=2048,
                           tie_embeddings=False),
        }
        lines = []
        for what, keys in big.items():
            model = describe(os.path.join(d, what + ".lua"), name=what, **keys)
            for target in ("i686-linux-gnu", "arm-linux-gnueabihf", "riscv32-unknown-elf", "thumbv7em-none-eabihf"):
                out = os.path.join(d, "out_%s_%s" % (what, target))
                p = run([self.ff, "emit", model, "-o", out, "--target", target], ok=False)
                lines.append(refused(p, "fixformer emit: ", what, "32-bit", target))
                if os.path.exists(out):
                    raise Failed("emit --target %s refused %s.lua but made %s" % (target, what, out))
            run([self.ff, "emit", model, "-o", os.path.join(d, "out64_" + what), "--target", "x86_64-linux-gnu"])
        return lines[0]

    def driver_logits_overflow_32bit(self):
        for tool in ("i686-linux-gnu-gcc", "qemu-i386"):
            if not shutil.which(tool):
                raise Failed("%s is not installed (scripts/deps test)" % tool)
        d = self.dir("logits32")
        V = 1100000  # 1000 positions x V floats = 4.4 GB: 105 MB after a 32-bit wrap
        model = describe(os.path.join(d, "wide.lua"), name="wide", arch="decoder-only", d_model=2, heads=1, d_ff=2,
                         layers=1, vocab=V, max_seq=1024)
        w = os.path.join(d, "wide.safetensors")
        run([self.ff, "init", model, "-o", w])
        run([self.ff, "emit", model, "-o", d, "--weights", w, "--with-main"])  # no --target: this machine's sizes
        exe = os.path.join(d, "wide")
        run(["i686-linux-gnu-gcc", "-O1", "-std=c99", "-static", "-o", exe, os.path.join(d, "wide.c"),
             os.path.join(d, "wide_main.c"), "-lm"])
        blob = os.path.join(d, "wide.weights")
        ok = run(["qemu-i386", exe, "--weights", blob, "--tokens", "5 7", "--max-new", "1"])  # 2 x V: fits
        if len(ok.stdout.split()) != 1:
            raise Failed("a short prompt: %r" % ok.stdout)
        p = run(["qemu-i386", exe, "--weights", blob, "--tokens", " ".join(["5"] * 1000), "--max-new", "1"],
                ok=False)
        return refused(p, "wide: ", "logits", "1000")

    # ---- emit's folder ------------------------------------------------------------------

    def emit_failure_leaves_no_folder(self):
        d = self.dir("emitdir")

        def small_files():  # writes past 4 KiB fail (EFBIG) instead of killing the process
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        new = os.path.join(d, "new")
        p = subprocess.run([self.ff, "emit", TINY, "-o", new], capture_output=True, text=True, timeout=300,
                           preexec_fn=small_files, restore_signals=False)
        line = refused(p, "fixformer emit: ", "cannot write")
        if os.path.lexists(new):
            raise Failed("emit -o NEWDIR failed (%s) but left %s behind: %s" % (line, new, os.listdir(new)))
        old = os.path.join(d, "old")
        os.makedirs(old)
        with open(os.path.join(old, "keep.txt"), "w") as f:
            f.write("mine\n")
        p = subprocess.run([self.ff, "emit", TINY, "-o", old], capture_output=True, text=True, timeout=300,
                           preexec_fn=small_files, restore_signals=False)
        refused(p, "fixformer emit: ", "cannot write")
        if sorted(os.listdir(old)) != ["keep.txt"]:
            raise Failed("emit into an existing folder failed and left %s" % os.listdir(old))
        run([self.ff, "emit", TINY, "-o", new])  # without the limit: the folder and its files
        if sorted(os.listdir(new)) != ["tiny.c", "tiny.h", "tiny_kernels.c"]:
            raise Failed("emit -o NEWDIR made %s" % os.listdir(new))
        return line


CASES = ["generate_lines_last_line_without_newline", "driver_generate_max_seq_2_20", "generate_logits_huge_max_new",
         "run_tokens_longer_than_max_seq", "bench_batch_too_large", "driver_length_above_max_seq",
         "driver_flag_integers", "emit_32bit_target_sizes", "driver_logits_overflow_32bit",
         "emit_failure_leaves_no_folder"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--sanitized", action="store_true", help="a sanitizer build: no valgrind, no address-space limit")
    ap.add_argument("--case", action="append", choices=CASES)
    args = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["XDG_CACHE_HOME"] = os.path.join(tmp, "cache")  # never the real one
        cases = Cases(os.path.abspath(args.fixformer), tmp, args.sanitized)
        for name in args.case or CASES:
            try:
                print("%-42s ok: %s" % (name, getattr(cases, name)()), flush=True)
            except (Failed, subprocess.TimeoutExpired) as e:
                failed += 1
                print("%-42s FAILED: %s" % (name, e), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
