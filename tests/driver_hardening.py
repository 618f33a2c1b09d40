#!/usr/bin/python3
"""The --with-main driver's files (issue 10, items 2-4), against hostile input.

Emits models/tiny.lua with --with-main, builds the driver with cc (and once
with -fsanitize=address,undefined), and checks:
  - malformed .npy inputs (a shape whose size product wraps, negative and
    fractional sizes, a rank of 5, Fortran order, an unknown dtype, a header
    dict with an unknown or repeated key, truncated and trailing data, a
    directory): each gets exactly one line on stderr, exit 1, no crash and no
    output file;
  - symlinks planted at the plausible temporary names (OUT.npy.tmp, ...) are
    not followed: the files they point to are unchanged;
  - --output onto a FIFO delivers the .npy to its reader, and the FIFO stays
    a FIFO; --output /dev/stdout writes the same bytes to a pipe as to a file;
    --output onto a symlink to a regular file leaves the symlink and writes
    its target; --output onto a directory fails cleanly;
  - the numbers equal `fixformer run --engine runtime`.
"""
import argparse
import os
import stat
import subprocess
import sys
import tempfile
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "models", "tiny.lua")


class Failed(Exception):
    pass


def run(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, **kw)
    if p.returncode != 0:
        raise Failed("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.decode(errors="replace")[:2000]))
    return p


def npy_bytes(header, data=b"", version=1):
    """A .npy file from a header dict text, padded like numpy does."""
    h = header.encode()
    pre = 10 if version == 1 else 12
    total = (pre + len(h) + 1 + 63) // 64 * 64
    h = h + b" " * (total - pre - len(h) - 1) + b"\n"
    size = len(h).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + size + h + data


def bad_inputs():
    """name -> bytes of a .npy the driver must refuse (input is int [B, S])."""
    i8 = "{'descr': '<i8', 'fortran_order': False, 'shape': %s, }"
    ids = np.array([1, 2], dtype="<i8").tobytes()  # valid token ids: accepting a bad header gives exit 0
    return {
        # issue 10: (2^62+1) * (2^62+4) * 4 wraps to 16 bytes of data on 64 bits
        "overflow": npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (4611686018427387905, "
                              "4611686018427387908), }", b"\x01" * 16),
        # the same wrap with sizes just under 2^32 each (4 bytes of int32 data)
        "overflow32": npy_bytes("{'descr': '<i4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                                b"\x01" * 4),
        # sizes each below 2^31 whose product passes 2^64
        "overflow_product": npy_bytes(i8 % "(2147483647, 2147483647, 2147483647, 2147483647)", ids),
        "negative": npy_bytes(i8 % "(-2, -1)", ids),
        "negative_one": npy_bytes(i8 % "(-1, 2)", ids),
        "fractional": npy_bytes(i8 % "(1.5, 2)", ids),
        "rank5": npy_bytes(i8 % "(1, 1, 1, 1, 2)", ids),
        "fortran": npy_bytes("{'descr': '<i8', 'fortran_order': True, 'shape': (1, 2), }", ids),
        "dtype": npy_bytes("{'descr': '>i8', 'fortran_order': False, 'shape': (1, 2), }", ids),
        "unknown_key": npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), 'x': 1, }",
                                 ids),
        "key_twice": npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 2), 'shape': (2, 1), }",
                               ids),
        # 'descr' only inside another value: found by strstr, not by a parser
        "hidden_key": npy_bytes("{'shape': (1, 2), 'fortran_order': False, 'x': 'descr': '<i8', }", ids),
        "truncated": npy_bytes(i8 % "(1, 2)", ids[:15]),
        "trailing": npy_bytes(i8 % "(1, 2)", ids + b"\x00"),
        "version4": npy_bytes(i8 % "(1, 2)", ids)[:6] + b"\x04" + npy_bytes(i8 % "(1, 2)", ids)[7:],
        "header_past_end": b"\x93NUMPY\x02\x00\xff\xff\xff\x7f{'descr'",
        "empty": b"",
    }


def expect_refusal(exe, args, name, out, env=None):
    p = subprocess.run([exe] + args, capture_output=True, env=env, timeout=120)
    err = p.stderr.decode(errors="replace")
    lines = err.splitlines()
    if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith("tiny: "):
        raise Failed("%s: expected exit 1 and one line 'tiny: ...' on stderr, got exit %d and %r"
                     % (name, p.returncode, err[:600]))
    if os.path.lexists(out):
        raise Failed("%s: refused, but %s exists" % (name, out))
    left = [f for f in os.listdir(os.path.dirname(out)) if f.startswith(os.path.basename(out))]
    if left:
        raise Failed("%s: temporaries left behind: %s" % (name, left))
    return lines[0]


def check_bad_inputs(exe, blob, d, env=None, tag=""):
    cases = bad_inputs()
    for name, data in cases.items():
        path = os.path.join(d, "bad_%s.npy" % name)
        with open(path, "wb") as f:
            f.write(data)
        out = os.path.join(d, "out_bad.npy")
        msg = expect_refusal(exe, ["--weights", blob, "--input", path, "--output", out], name, out, env)
        print("%s%s: %s" % (tag, name, msg), flush=True)
    # a directory as the input, and as the weights
    out = os.path.join(d, "out_bad.npy")
    print("%sdirectory input: %s" % (tag, expect_refusal(exe, ["--weights", blob, "--input", d, "--output", out],
                                                          "directory input", out, env)), flush=True)
    good = os.path.join(d, "in.npy")
    print("%sdirectory weights: %s" % (tag, expect_refusal(exe, ["--weights", d, "--input", good, "--output", out],
                                                            "directory weights", out, env)), flush=True)


def check_planted_symlinks(exe, blob, good, ref, d):
    """Symlinks at every plausible temporary name must not be followed."""
    out = os.path.join(d, "planted.npy")
    victims = {}
    names = [out + ".tmp", out + ".tmp.0", out + "~", os.path.join(d, ".planted.npy.tmp"), out + ".part"]
    for i, n in enumerate(names):
        victim = os.path.join(d, "victim%d.txt" % i)
        with open(victim, "w") as f:
            f.write("precious %d\n" % i)
        os.symlink(victim, n)
        victims[victim] = "precious %d\n" % i
    run([exe, "--weights", blob, "--input", good, "--output", out])
    for victim, text in victims.items():
        if open(victim, "rb").read() != text.encode():
            raise Failed("a symlink planted at a temporary name was followed: %s was overwritten" % victim)
    for n in names:
        if not os.path.islink(n):
            raise Failed("the planted symlink %s was replaced" % n)
    compare("planted", np.load(out), ref)
    stray = [f for f in os.listdir(d) if f.startswith("planted.npy.") and os.path.join(d, f) not in names]
    if stray:
        raise Failed("temporaries left behind: %s" % stray)
    print("symlinks planted at %d temporary names: not followed, output correct" % len(names), flush=True)


def check_fifo(exe, blob, good, ref, d):
    fifo = os.path.join(d, "fifo.npy")
    os.mkfifo(fifo)
    got = {}

    def reader():
        with open(fifo, "rb") as f:
            got["data"] = f.read()

    t = threading.Thread(target=reader, daemon=True)  # blocked for good if the FIFO is replaced
    t.start()
    p = subprocess.run([exe, "--weights", blob, "--input", good, "--output", fifo], capture_output=True, timeout=120)
    if not stat.S_ISFIFO(os.lstat(fifo).st_mode):
        raise Failed("--output FIFO: the FIFO was replaced by a file (%s)" % stat.filemode(os.lstat(fifo).st_mode))
    if p.returncode != 0:
        try:  # unblock the reader
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        raise Failed("--output FIFO: exit %d: %s" % (p.returncode, p.stderr.decode(errors="replace")))
    t.join(60)
    path = os.path.join(d, "from_fifo.npy")
    with open(path, "wb") as f:
        f.write(got.get("data", b""))
    compare("fifo", np.load(path), ref)
    print("--output FIFO: %d bytes delivered to the reader, still a FIFO" % len(got["data"]), flush=True)


def check_devices(exe, blob, good, ref, d, file_bytes):
    """Only for a driver that has just passed check_fifo (it writes into a
    non-regular file in place): an old driver would rename over the device."""
    # What /dev/stdout and /dev/null are, made in a folder of our own: a driver
    # that regressed replaces these, never the machine's (we run as root).
    stdout = os.path.join(d, "stdout")
    os.symlink("/proc/self/fd/1", stdout)
    p = run([exe, "--weights", blob, "--input", good, "--output", stdout])
    if p.stdout != file_bytes or not os.path.islink(stdout):
        raise Failed("--output /dev/stdout: %d bytes on the pipe, the file has %d (or they differ)"
                     % (len(p.stdout), len(file_bytes)))
    null = os.path.join(d, "null")
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except OSError:  # no mknod: unprivileged, where the real /dev/null cannot be replaced anyway
        null = "/dev/null" if os.getuid() != 0 else None
    if null is None:
        raise Failed("cannot make a character device to test --output with")
    run([exe, "--weights", blob, "--input", good, "--output", null])
    if not stat.S_ISCHR(os.lstat(null).st_mode):
        raise Failed("--output onto a character device replaced it")
    # the input from a pipe (/dev/stdin) reads the same
    with open(good, "rb") as f:
        p = run([exe, "--weights", blob, "--input", "/dev/stdin", "--output", "/dev/stdout"], stdin=f)
    if p.stdout != file_bytes:
        raise Failed("--input /dev/stdin: a different output")
    # an endless stream as the weights: refused at the blob's size, not read without end
    out = os.path.join(d, "zero.npy")
    msg = expect_refusal(exe, ["--weights", "/dev/zero", "--input", good, "--output", out], "weights /dev/zero", out)
    print("--output /dev/stdout: the same %d bytes as the file; /dev/null stays a device; --input /dev/stdin reads;"
          " --weights /dev/zero: %s" % (len(p.stdout), msg), flush=True)


def check_symlink_output(exe, blob, good, d, file_bytes):
    target = os.path.join(d, "real_target.npy")
    with open(target, "wb") as f:
        f.write(b"old content, longer than the output " * 1000)
    link = os.path.join(d, "link.npy")
    os.symlink(target, link)
    run([exe, "--weights", blob, "--input", good, "--output", link])
    if not os.path.islink(link) or os.readlink(link) != target:
        raise Failed("--output symlink: the symlink was replaced")
    if open(target, "rb").read() != file_bytes:
        raise Failed("--output symlink: its target does not hold exactly the output")
    # a directory as the output: one line, exit 1, the directory untouched
    dd = os.path.join(d, "outdir.npy")
    os.mkdir(dd)
    p = subprocess.run([exe, "--weights", blob, "--input", good, "--output", dd], capture_output=True)
    lines = p.stderr.decode(errors="replace").splitlines()
    if p.returncode != 1 or len(lines) != 1 or not os.path.isdir(dd) or os.listdir(dd):
        raise Failed("--output DIRECTORY: exit %d, stderr %r" % (p.returncode, lines))
    print("--output symlink: still a symlink, its target holds the output; directory: %s" % lines[0], flush=True)


def compare(name, out, ref):
    if out.shape != ref.shape or out.dtype != np.float32:
        raise Failed("%s: shape %s %s, runtime %s" % (name, out.shape, out.dtype, ref.shape))
    scale = max(float(np.abs(ref).max()), 1e-30)
    if not np.allclose(out, ref, rtol=1e-5, atol=1e-5 * scale):
        raise Failed("%s: max err %.3e (scale %.3e)" % (name, float(np.abs(out - ref).max()), scale))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    args = ap.parse_args()
    ff = os.path.abspath(args.fixformer)
    with tempfile.TemporaryDirectory() as d:
        try:
            weights = os.path.join(d, "w.safetensors")
            run([ff, "init", MODEL, "-o", weights])
            src = os.path.join(d, "src")
            run([ff, "emit", MODEL, "-o", src, "--weights", weights, "--with-main"])
            files = [os.path.join(src, f) for f in ("tiny.c", "tiny_main.c")]
            exe, asan = os.path.join(d, "tiny"), os.path.join(d, "tiny_asan")
            run([args.cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", "-o", exe] + files + ["-lm"])
            run(["clang", "-std=c99", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
                 "-o", asan] + files + ["-lm"])
            blob = os.path.join(src, "tiny.weights")
            good = os.path.join(d, "in.npy")
            np.save(good, np.random.RandomState(5).randint(0, 128, size=(3, 9)).astype(np.int64))
            ref_path = os.path.join(d, "ref.npy")
            run([ff, "run", MODEL, "--weights", weights, "--input", good, "--output", ref_path,
                 "--engine", "runtime"])
            ref = np.load(ref_path)
            out = os.path.join(d, "out.npy")
            run([exe, "--weights", blob, "--input", good, "--output", out])
            compare("file", np.load(out), ref)
            mode = stat.S_IMODE(os.stat(out).st_mode)
            umask = os.umask(0)
            os.umask(umask)
            if mode != 0o666 & ~umask:
                raise Failed("the output's mode is %o, not %o" % (mode, 0o666 & ~umask))
            file_bytes = open(out, "rb").read()
            print("driver = runtime on a [3, 9] batch (mode %o)" % mode, flush=True)
            # what numpy writes is read: versions 1-3, int32, and a header in double quotes and odd spacing
            ids = np.load(good)
            variants = {"v2": npy_bytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 9), }",
                                        ids.tobytes(), 2),
                        "v3 int32": npy_bytes("{'descr':'<i4','fortran_order':False,'shape':(3,9)}",
                                              ids.astype("<i4").tobytes(), 3),
                        "quotes": npy_bytes('{ "shape" : ( 3 , 9 , ) , "descr" : "<i8" , "fortran_order" : False }',
                                            ids.tobytes())}
            for name, data in variants.items():
                path = os.path.join(d, "variant.npy")
                with open(path, "wb") as f:
                    f.write(data)
                run([exe, "--weights", blob, "--input", path, "--output", out])
                if open(out, "rb").read() != file_bytes:
                    raise Failed("input %s: a different output" % name)
            print("inputs as .npy %s: the same output" % ", ".join(variants), flush=True)

            env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=99",
                       UBSAN_OPTIONS="halt_on_error=1:exitcode=99")
            for name, e, tag in ((exe, None, ""), (asan, env, "asan ")):
                bd = os.path.join(d, "bad_" + os.path.basename(name))
                os.mkdir(bd)
                np.save(os.path.join(bd, "in.npy"), np.load(good))
                check_bad_inputs(name, blob, bd, e, tag)
            for name in (exe, asan):
                sd = os.path.join(d, "sym_" + os.path.basename(name))
                os.mkdir(sd)
                check_planted_symlinks(name, blob, good, ref, sd)
                check_fifo(name, blob, good, ref, sd)
                check_symlink_output(name, blob, good, sd, file_bytes)
                check_devices(name, blob, good, ref, sd, file_bytes)  # after check_fifo passed
        except (Failed, subprocess.TimeoutExpired) as e:
            print("FAILED: %s" % e)
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
