#!/usr/bin/python3
"""Where fixformer writes, and that it writes nothing it should not:

  * `run --output` onto a FIFO, a character device, a symlink to a regular
    file and a symlink to this process's stdout writes through them: the node
    stays what it was (it is never replaced by rename) and the bytes are the
    same .npy as a regular file gets;
  * `emit` writes all its files or none: with NAME.c (or NAME_main.c) a
    directory, or with a file-size limit that lets NAME.h through and stops
    NAME.c, nothing new is left in the folder, and files of an earlier emit
    stay as they were;
  * `bench` without --weights puts its random weights in a private temporary
    file: a name planted where the old predictable name was does not stop it
    (in a PID namespace, where that name is known), and nothing is left.

  outputs.py --fixformer BIN
"""
import argparse
import os
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
TINY = os.path.join(ROOT, "models", "tiny.lua")
failures = passed = 0


def check(name, ok, detail=""):
    global failures, passed
    failures += not ok
    passed += bool(ok)
    print("%-44s %s" % (name, "ok" if ok else "FAIL " + detail))


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, timeout=60, **kw)


def outputs(ff, tmp, weights):
    base = ["run", TINY, "--weights", weights, "--tokens", "1 2 3, 4 5"]
    regular = os.path.join(tmp, "regular.npy")
    p = run([ff] + base + ["--output", regular])
    check("output to a regular file", p.returncode == 0, p.stderr.decode())
    want = open(regular, "rb").read()

    fifo = os.path.join(tmp, "out.fifo")  # a reader on the other end gets the .npy
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("bytes", open(fifo, "rb").read()), daemon=True)
    reader.start()
    p = run([ff] + base + ["--output", fifo])
    reader.join(30)
    check("output to a FIFO: bytes delivered", p.returncode == 0 and got.get("bytes") == want, p.stderr.decode())
    check("output to a FIFO: still a FIFO", stat.S_ISFIFO(os.lstat(fifo).st_mode))

    target = os.path.join(tmp, "target.npy")  # a symlink to a regular file stays a symlink
    with open(target, "wb") as f:
        f.write(b"old")
    link = os.path.join(tmp, "link.npy")
    os.symlink(target, link)
    p = run([ff] + base + ["--output", link])
    check("output to a symlink: target written", p.returncode == 0 and open(target, "rb").read() == want,
          p.stderr.decode())
    check("output to a symlink: still a symlink", os.path.islink(link))

    stdout_link = os.path.join(tmp, "stdout")  # what /dev/stdout is, in a folder of our own
    os.symlink("/proc/self/fd/1", stdout_link)
    p = run([ff] + base + ["--output", stdout_link])
    check("output to stdout through a symlink", p.returncode == 0 and p.stdout == want, p.stderr.decode())
    check("output to stdout: the symlink stays", os.path.islink(stdout_link))

    null = os.path.join(tmp, "null")  # a character device (root only: mknod)
    try:
        os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        null = "/dev/null" if os.getuid() != 0 else None  # unprivileged: the real one cannot be replaced anyway
    if null:
        p = run([ff] + base + ["--output", null])
        check("output to a character device", p.returncode == 0 and stat.S_ISCHR(os.lstat(null).st_mode),
              p.stderr.decode())
    else:
        check("output to a character device (mknod refused)", False, "cannot make a device node to test with")

    folder = os.path.join(tmp, "adir")
    os.mkdir(folder)
    p = run([ff] + base + ["--output", folder])
    check("output to a directory: refused", p.returncode == 1 and b"is a directory" in p.stderr and
          os.path.isdir(folder) and not os.listdir(folder), p.stderr.decode())


def emit_all_or_none(ff, tmp, weights):
    def listing(d):
        return sorted(os.listdir(d)) if os.path.isdir(d) else []

    # NAME.c is a directory: NAME.h must not appear either
    out = os.path.join(tmp, "emit1")
    os.makedirs(os.path.join(out, "tiny.c"))
    p = run([ff, "emit", TINY, "-o", out])
    check("emit, NAME.c a directory: refused", p.returncode == 1 and b"tiny.c" in p.stderr, p.stderr.decode())
    check("emit, NAME.c a directory: nothing left", listing(out) == ["tiny.c"], str(listing(out)))

    # a file-size limit between the header's size and the source's: the disk "fills" at NAME.c
    good = os.path.join(tmp, "emit-good")
    p = run([ff, "emit", TINY, "-o", good, "--with-main", "--weights", weights])
    sizes = {n: os.path.getsize(os.path.join(good, n)) for n in listing(good)}
    limit = sizes["tiny.h"] + 1

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write(2) fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    out = os.path.join(tmp, "emit2")
    p = run([ff, "emit", TINY, "-o", out], preexec_fn=small_files)
    check("emit, disk full at NAME.c: refused", p.returncode == 1 and b"tiny.c" in p.stderr, p.stderr.decode())
    check("emit, disk full at NAME.c: nothing left", listing(out) == [], str(listing(out)))

    # an earlier emit's files stay as they were when a later file fails
    out = os.path.join(tmp, "emit3")
    os.makedirs(out)
    for n in ("tiny.h", "tiny.c"):
        with open(os.path.join(out, n), "w") as f:
            f.write("earlier " + n)
    os.makedirs(os.path.join(out, "tiny_main.c"))
    p = run([ff, "emit", TINY, "-o", out, "--with-main"])
    kept = all(open(os.path.join(out, n)).read() == "earlier " + n for n in ("tiny.h", "tiny.c"))
    check("emit, last file fails: earlier files kept", p.returncode == 1 and kept and
          listing(out) == ["tiny.c", "tiny.h", "tiny_main.c"], p.stderr.decode() + str(listing(out)))

    # and when everything can be written, everything is
    check("emit, all files written",
          sorted(sizes) == ["tiny.c", "tiny.h", "tiny.weights", "tiny_kernels.c", "tiny_main.c"],
          str(sorted(sizes)))


def bench_temporary(ff, tmp):
    folder = os.path.join(tmp, "benchtmp")
    os.mkdir(folder)
    # In a new PID namespace fixformer is PID 1, so the old name was fixformer-bench-1.safetensors:
    # another user could make it first.  Plant it as a directory; the bench must not care.
    planted = os.path.join(folder, "fixformer-bench-1.safetensors")
    os.mkdir(planted)
    cmd = [ff, "bench", TINY, "--seq", "4", "--iters", "1", "--engine", "runtime"]
    env = dict(os.environ, TMPDIR=folder)
    p = run(["unshare", "--pid", "--fork"] + cmd, env=env)
    if p.returncode != 0 and b"unshare" in p.stderr:  # no namespaces here: the plain run still must leave nothing
        p = run(cmd, env=env)
    check("bench, a planted temporary name", p.returncode == 0, p.stderr.decode())
    check("bench, nothing left in TMPDIR", os.listdir(folder) == ["fixformer-bench-1.safetensors"],
          str(os.listdir(folder)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ff = os.path.abspath(ap.parse_args().fixformer)
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, "w.safetensors")
        subprocess.run([ff, "init", TINY, "-o", weights], check=True)
        outputs(ff, tmp, weights)
        emit_all_or_none(ff, tmp, weights)
        bench_temporary(ff, tmp)
    print("outputs: %d passed, %d failed" % (passed, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
