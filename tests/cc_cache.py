#!/usr/bin/python3
"""The cc engine's build cache (issue 10: items 1, 8, 9 and the cache key and
pruning of its "Also"), through `fixformer run --engine cc` on models/tiny.lua,
each case in a cache folder of its own (XDG_CACHE_HOME):

  folder     a pre-made cache folder that is world-writable, another user's
             (as root; else group-writable) or a symbolic link is refused in
             one line, and the libraries planted in it never run
  entries    an entry replaced after it was built (in place or by rename),
             truncated or emptied, or a replaced kernel library, is rebuilt,
             never run, and the output is right
  processes  six processes on an empty cache at once all succeed and agree
             with the runtime; no temporary is left (--threads-test BIN: the
             same with six threads of one process, tests/test_cc_cache.c)
  key        the same description through another path or from a copy reuses
             the object; another compiler identity (same $CC, other
             --version) rebuilds
  failures   a missing compiler, a full disk and a compile error each give
             one line that says why
  tidy       stale temporaries of killed builds are removed, the size bound
             (FIXFORMER_CACHE_MAX_MB) removes the least recently used entry
  packed     (--check packed; ctest pack_cache) the packed-weight cache
             (issue 13): a second start on tcc and on cc maps the packed
             weights without reading the weights file ("packed weights:
             cached (key memoized)": its sha256 remembered by its identity)
             and gives the bytes of a cache-less run; a touched file (new
             mtime, same bytes) is hashed again and gives the same bytes;
             weights with one float changed miss and give the new numbers,
             the runtime's; an entry changed in place, replaced by a
             symbolic link, made group-writable or given away (as root) is
             rebuilt, never used; cache --clean removes it.  Memory: the
             peak RSS of a start that maps a stories15M-shaped model's
             blob (61 MB) is below that of a tiny model's start + 1.3 x the
             blob: nothing walks the mapped float32 file on a hit, also
             when q/k/v and gate/up are stored apart (their fusing is
             deferred until a reader needs it), which decodes the same ids;
             the first start (packing into the new entry) and a cache-less
             one stay below it too (the file's pages leave as they are
             packed); the runtime engine's, which reads the mapped file,
             is above + 0.8 x the file: the measure sees mapped pages.
             Bound: unset, FIXFORMER_CACHE_MAX_MB's default grows by the
             largest entry, so a 300 MB blob (sparse) stays when another
             model is built; FIXFORMER_CACHE_MAX_MB=256 removes it
  valgrind   (--check valgrind) with the cache built natively (AVX-512 here),
             valgrind, whose CPU has no AVX-512, runs the cc engine (no SIGILL)

  cc_cache.py --fixformer BIN [--threads-test BIN] [--check all|valgrind|NAME]
"""
import argparse
import hashlib
import io
import json
import re
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "models", "tiny.lua")
TOKENS = "1 2 3 5 8 13"

PLANTED = r"""
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void planted(void) {
  int fd = open(MARKER, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) close(fd);
}
int planted_symbol = 1;
"""


class Case:
    def __init__(self, ff, tmp, threads_test):
        self.ff, self.tmp, self.threads_test = ff, tmp, threads_test
        self.weights = os.path.join(tmp, "W.safetensors")
        self.marker = os.path.join(tmp, "PLANTED-CODE-RAN")
        self.planted = os.path.join(tmp, "planted.so")
        self.n = 0
        self.fastcc = os.path.join(tmp, "fastcc")  # cc at -O0 (the last -O wins): the checks need no fast code
        with open(self.fastcc, "w") as f:
            f.write('#!/bin/sh\nexec cc "$@" -O0\n')
        os.chmod(self.fastcc, 0o755)
        must(subprocess.run([ff, "init", TINY, "-o", self.weights], capture_output=True, text=True))
        p = self.run(os.path.join(tmp, "unused"), engine="runtime")
        must(p)
        self.ref = np.load(p.out)
        src = os.path.join(tmp, "planted.c")
        with open(src, "w") as f:
            f.write(PLANTED)
        must(subprocess.run(["cc", "-shared", "-fPIC", '-DMARKER="%s"' % self.marker, "-o", self.planted, src],
                            capture_output=True, text=True))

    def run(self, cache, engine="cc", model=TINY, env=None, cwd=None, wrap=None):
        self.n += 1
        out = os.path.join(self.tmp, "out%d.npy" % self.n)
        e = dict(os.environ, XDG_CACHE_HOME=cache)
        e.pop("FIXFORMER_CACHE_MAX_MB", None)
        e["CC"] = self.fastcc
        e.update(env or {})
        cmd = (wrap or []) + [self.ff, "run", model, "--weights", self.weights, "--tokens", TOKENS, "--output", out,
                              "--engine", engine]
        p = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=cwd)
        p.out = out
        return p

    def cache(self, name):
        return os.path.join(self.tmp, name)

    def ok(self, p, what):
        """exit 0 and the runtime's numbers; the planted code never ran"""
        self.not_planted(what)
        if p.returncode != 0:
            raise Failure("%s: exit %d: %s" % (what, p.returncode, p.stderr.strip()[-2000:]))
        got = np.load(p.out)
        if got.shape != self.ref.shape or not np.allclose(got, self.ref, rtol=1e-4, atol=1e-4):
            raise Failure("%s: the output differs from the runtime's" % what)
        self.not_planted(what)

    def not_planted(self, what):
        if os.path.exists(self.marker):
            raise Failure("%s: a planted library was RUN (its constructor wrote %s)" % (what, self.marker))

    def fails(self, p, what, *pieces):
        """one line on stderr with each piece, exit 1..125, no output file"""
        lines = p.stderr.strip().splitlines()
        self.not_planted(what)
        if not 1 <= p.returncode <= 125 or len(lines) != 1 or not all(x in lines[0] for x in pieces):
            raise Failure("%s: want exit 1..125 and one line with %s, got exit %d:\n%s" %
                          (what, pieces, p.returncode, p.stderr.strip()[-2000:]))
        if os.path.exists(p.out):
            raise Failure("%s: an output file was written" % what)
        return lines[0]

    def plant(self, path, how="rename"):
        """replaces path with the planted library (same owner, mode 0600)"""
        with open(self.planted, "rb") as f:
            data = f.read()
        if how == "in place":
            with open(path, "r+b") as f:
                f.truncate(0)
                f.write(data)
        else:
            tmp = path + ".new"
            with open(tmp, "wb") as f:
                f.write(data)
            os.chmod(tmp, 0o600)
            os.rename(tmp, path)
        return hashlib.sha256(data).hexdigest()


class Failure(Exception):
    pass


def must(p):
    if p.returncode != 0:
        raise Failure("%s: exit %d: %s" % (" ".join(p.args), p.returncode, p.stderr.strip()[-2000:]))


def files(cache):
    d = os.path.join(cache, "fixformer")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


def sos(cache):
    return [os.path.join(cache, "fixformer", n) for n in files(cache) if n.endswith(".so")]


def entry_files_only(cache, what, n_entries):
    names = files(cache)
    if len(sos(cache)) != n_entries:
        raise Failure("%s: want %d objects, found %s" % (what, n_entries, names))
    want = [n for n in names if len(n.split(".")[0]) == 32 and n.split(".", 1)[1] in ("so", "sha256")]
    if len(want) != 2 * n_entries or len(names) != len(want):
        raise Failure("%s: want %d entries (KEY.so + KEY.sha256) and nothing else, found %s" % (what, n_entries, names))


def verified(cache, what):
    """every KEY.so hashes to its KEY.sha256"""
    for so in sos(cache):
        with open(so, "rb") as f:
            have = hashlib.sha256(f.read()).hexdigest()
        with open(so[:-3] + ".sha256") as f:
            if f.read().strip() != have:
                raise Failure("%s: %s does not match its recorded hash" % (what, so))


def plant_folder(c, cache, mode, chown=None):
    """a pre-made folder with the planted library under the names (and
    matching recorded hashes) of a clean build there, as an attacker who
    runs fixformer himself learns them"""
    c.ok(c.run(cache), "clean build")
    names = files(cache)
    d = os.path.join(cache, "fixformer")
    shutil.rmtree(d)
    os.makedirs(d)
    planted = open(c.planted, "rb").read()
    for n in names:
        with open(os.path.join(d, n), "wb") as f:
            f.write(hashlib.sha256(planted).hexdigest().encode() + b"\n" if n.endswith(".sha256") else planted)
    os.chmod(d, mode)
    if chown is not None:
        for n in os.listdir(d):
            os.chown(os.path.join(d, n), chown, chown)
        os.chown(d, chown, chown)
    return d


def check_folder(c):
    d = plant_folder(c, c.cache("world"), 0o777)
    line = c.fails(c.run(c.cache("world")), "world-writable cache folder", d, "writable by others")
    print("  world-writable folder: refused: %s" % line)
    if os.geteuid() == 0:
        d = plant_folder(c, c.cache("theirs"), 0o755, chown=65534)
        line = c.fails(c.run(c.cache("theirs")), "another user's cache folder", d, "owned by uid 65534")
        print("  another user's folder (uid 65534): refused: %s" % line)
    else:  # cannot give a folder away: the mode check instead
        d = plant_folder(c, c.cache("group"), 0o770)
        line = c.fails(c.run(c.cache("group")), "group-writable cache folder", d, "writable by its group")
        print("  group-writable folder: refused: %s" % line)
    real = plant_folder(c, c.cache("linked-target"), 0o700)
    os.makedirs(c.cache("linked"))
    os.symlink(real, os.path.join(c.cache("linked"), "fixformer"))
    line = c.fails(c.run(c.cache("linked")), "cache folder through a symbolic link", "symbolic link")
    print("  folder through a symbolic link: refused: %s" % line)


def kernel_library(cache):
    """the .so another .so names as the library it needs"""
    blobs = {so: open(so, "rb").read() for so in sos(cache)}
    for so in blobs:
        tag = os.path.basename(so).encode()
        if any(tag in b for o, b in blobs.items() if o != so):
            return so
    raise Failure("no kernel library found in %s" % cache)


def check_entries(c):
    cache = c.cache("entries")
    c.ok(c.run(cache), "first build")
    kernels = kernel_library(cache)
    model = [so for so in sos(cache) if so != kernels][0]
    rounds = [("model planted in place, kernel library truncated", lambda: (c.plant(model, "in place"),
                                                                            os.truncate(kernels, 100))),
              ("model emptied, kernel library planted (rename)", lambda: (os.truncate(model, 0),
                                                                          c.plant(kernels, "rename")))]
    for what, spoil in rounds:
        spoil()
        c.ok(c.run(cache), what)
        verified(cache, what)
        entry_files_only(cache, what, 2)
        print("  %s -> rebuilt, not run; output right" % what)


def check_processes(c):
    cache = c.cache("procs")
    e = dict(os.environ, XDG_CACHE_HOME=cache, CC=c.fastcc)
    procs = []
    for i in range(6):
        out = os.path.join(c.tmp, "proc%d.npy" % i)
        procs.append((subprocess.Popen([c.ff, "run", TINY, "--weights", c.weights, "--tokens", TOKENS, "--output",
                                        out, "--engine", "cc"], stderr=subprocess.PIPE, text=True, env=e), out))
    for i, (p, out) in enumerate(procs):
        err = p.communicate()[1]
        r = subprocess.CompletedProcess(p.args, p.returncode, "", err)
        r.out = out
        c.ok(r, "process %d of 6" % i)
    entry_files_only(cache, "6 processes", 2)
    verified(cache, "6 processes")
    print("  6 processes on an empty cache: all succeeded, equal to the runtime")
    if c.threads_test:
        p = subprocess.run([c.threads_test, TINY, c.weights], capture_output=True, text=True,
                           env=dict(os.environ, CC=c.fastcc))
        if p.returncode != 0:
            raise Failure("threads test: exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr))
        print("  " + p.stdout.strip().replace("\n", "\n  "))


def check_key(c):
    cache = c.cache("key")
    c.ok(c.run(cache), "models/tiny.lua")
    other = os.path.join(c.tmp, "elsewhere")
    os.makedirs(other)
    shutil.copy(TINY, other)
    c.ok(c.run(cache, model=os.path.join(other, "tiny.lua")), "a copy in another folder")
    c.ok(c.run(cache, model="./models/../models/tiny.lua", cwd=ROOT), "./models/../models/tiny.lua")
    entry_files_only(cache, "the same model through three paths", 2)
    print("  the same description through 3 paths: one object")
    cc = os.path.join(c.tmp, "mycc")
    version = os.path.join(c.tmp, "mycc.version")
    with open(cc, "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = --version ]; then cat "%s"; exit 0; fi\nexec cc "$@" -O0\n' % version)
    os.chmod(cc, 0o755)
    with open(version, "w") as f:
        f.write("mycc (fixformer test) 1.0\n")
    c.ok(c.run(cache, env={"CC": cc}), "CC=mycc 1.0")
    entry_files_only(cache, "another compiler", 4)
    with open(version, "w") as f:
        f.write("mycc (fixformer test) 2.0\n")
    c.ok(c.run(cache, env={"CC": cc}), "CC=mycc 2.0")
    entry_files_only(cache, "the same $CC, another version", 6)
    print("  the same $CC reporting another --version: rebuilt")


def script(c, name, body):
    path = os.path.join(c.tmp, name)
    with open(path, "w") as f:
        f.write('#!/bin/sh\nif [ "$1" = --version ]; then echo "%s 1.0"; exit 0; fi\n%s\n' % (name, body))
    os.chmod(path, 0o755)
    return path


def check_failures(c):
    cache = c.cache("failures")
    line = c.fails(c.run(cache, env={"CC": "/nonexistent/cc"}), "CC=/nonexistent/cc",
                   "compiler '/nonexistent/cc' not found")
    print("  missing compiler: %s" % line)
    full = script(c, "fullcc", 'echo "/usr/bin/ld: final link failed: No space left on device" >&2\n'
                  'echo "collect2: error: ld returned 1 exit status" >&2\nexit 1')
    line = c.fails(c.run(cache, env={"CC": full}), "full disk", "No space left on device")
    print("  full disk: %s" % line)
    bad = script(c, "badcc", 'echo "In function f:" >&2\necho "<stdin>:7:3: error: boom" >&2\nexit 1')
    line = c.fails(c.run(cache, env={"CC": bad}), "compile error", "error: boom")
    print("  compile error: %s" % line)
    if [n for n in files(cache) if ".tmp" in n]:
        raise Failure("failed builds left temporaries: %s" % files(cache))


def check_tidy(c):
    cache = c.cache("tidy")
    d = os.path.join(cache, "fixformer")
    os.makedirs(d, 0o700)
    stale, fresh = os.path.join(d, "0" * 32 + ".tmp-killed"), os.path.join(d, "1" * 32 + ".tmp-running")
    for path in (stale, fresh):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
    old = time.time() - 3600
    os.utime(stale, (old, old))
    c.ok(c.run(cache), "build beside temporaries")
    if os.path.exists(stale) or not os.path.exists(fresh):
        raise Failure("want the hour-old temporary removed and the fresh one kept: %s" % files(cache))
    os.unlink(fresh)
    print("  a killed build's temporary (1 h old) removed, a running one's kept")
    first = set(sos(cache))
    for so in first:  # used long ago
        os.utime(so, (old, old))
    other = os.path.join(c.tmp, "tiny32.lua")
    with open(TINY) as f:
        text = f.read()
    with open(other, "w") as f:
        f.write(text.replace("max_seq    = 64", "max_seq    = 32"))
    p = c.run(cache, model=other, env={"FIXFORMER_CACHE_MAX_MB": "0"})
    must(p)
    now = set(sos(cache))
    kept, new = now & first, now - first
    if len(now) != 2 or len(kept) != 1 or len(new) != 1:
        raise Failure("FIXFORMER_CACHE_MAX_MB=0: want the shared kernel library and the new model only, "
                      "have %s (before: %s)" % (files(cache), first))
    entry_files_only(cache, "after pruning", 2)
    print("  FIXFORMER_CACHE_MAX_MB=0: the unused model's entry removed, the kernel library and new model kept")
    c.fails(c.run(cache, env={"FIXFORMER_CACHE_MAX_MB": "lots"}), "FIXFORMER_CACHE_MAX_MB=lots",
            "FIXFORMER_CACHE_MAX_MB")


def check_valgrind(c):
    cache = c.cache("valgrind")
    native = {"CC": os.environ.get("CC", "cc")}
    c.ok(c.run(cache, env=native), "native build")
    p = c.run(cache, env=native, wrap=["valgrind", "--error-exitcode=9", "-q"])
    if p.returncode != 0:
        raise Failure("under valgrind: exit %d:\n%s" % (p.returncode, p.stderr.strip()[-3000:]))
    c.ok(p, "under valgrind")
    print("  built natively, then under valgrind (no AVX-512): ran, equal to the runtime (%d objects in the cache)"
          % len(sos(cache)))


def blobs(cache):
    return [os.path.join(cache, "fixformer", n) for n in files(cache) if n.endswith(".blob")]


def packed_run(c, cache, engine, want, what, cached=True):
    """runs with the packed-weight cache (or without); stderr says want (a regular expression)"""
    p = c.run(cache, engine, env={"FIXFORMER_PACK_CACHE": "1" if cached else "0", "FIXFORMER_PACK_TRACE": "1"})
    must(p)
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("packed weights:")]
    if len(said) != (1 if want else 0) or (want and not re.fullmatch(want, said[0])):
        raise Failure("%s: want %r on stderr, got %s" % (what, want, said))
    with open(p.out, "rb") as f:
        return f.read()


def settle(path):
    """waits until path's mtime and ctime are older than the 100 ms within which fixformer does not trust a
    file's identity to show a change (host/jit_cc.c settled): then its sha256 is remembered"""
    st = os.stat(path)
    wait = max(st.st_mtime_ns, st.st_ctime_ns) / 1e9 + 0.25 - time.time()
    if wait > 0:
        time.sleep(wait)


def check_packed_entry(cache):
    """one KEY.blob of mode 0600, verified by its KEY.sha256"""
    b = blobs(cache)
    if len(b) != 1 or os.path.islink(b[0]) or stat.S_IMODE(os.lstat(b[0]).st_mode) != 0o600:
        raise Failure("want one regular KEY.blob of mode 0600, found %s" % files(cache))
    with open(b[0], "rb") as f, open(b[0][:-5] + ".sha256") as g:
        if hashlib.sha256(f.read()).hexdigest() != g.read().strip():
            raise Failure("%s does not match its recorded hash" % b[0])
    return b[0]


def spoil_middle(path):
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        f.write(b"\x7f" * 64)


def check_packed(c):
    cache = c.cache("packed")
    want = {e: packed_run(c, cache, e, None, "cache-less " + e, cached=False) for e in ("tcc", "cc")}
    if blobs(cache):
        raise Failure("FIXFORMER_PACK_CACHE=0 stored packed weights: %s" % files(cache))
    settle(c.weights)
    memo = r"packed weights: cached \(key memoized\)"
    for engine, how in (("tcc", "packed weights: packed"), ("tcc", memo), ("cc", memo)):
        if packed_run(c, cache, engine, how, engine) != want[engine]:
            raise Failure("%s, %s: the output differs from the cache-less run's bytes" % (engine, how))
    c.ok(c.run(cache, env={"FIXFORMER_PACK_CACHE": "1"}), "cc, cached")
    blob = check_packed_entry(cache)
    print("  second start on tcc and cc: cached, the key remembered, same bytes as a cache-less run")
    os.utime(c.weights)  # same bytes, new mtime: hashed again, then remembered again
    settle(c.weights)
    for how in ("packed weights: cached", memo):
        if packed_run(c, cache, "cc", how, "touched weights") != want["cc"]:
            raise Failure("touched weights, %s: the output differs from the cache-less run's bytes" % how)
    print("  weights touched: hashed again (cached), then remembered; same bytes")
    with open(c.weights, "rb") as f:
        data = f.read()
    changed = bytearray(data)
    changed[-4:] = np.array([7.5], "<f4").tobytes()  # the last float of the last tensor, same file
    try:
        with open(c.weights, "wb") as f:
            f.write(changed)
        new = packed_run(c, cache, "cc", None, "cache-less cc, changed weights", cached=False)
        if packed_run(c, cache, "cc", "packed weights: packed", "changed weights") != new or new == want["cc"]:
            raise Failure("changed weights: not the cache-less run's new bytes")
        p = c.run(cache, "runtime")
        must(p)
        if not np.allclose(np.load(io.BytesIO(new)), np.load(p.out), rtol=1e-4, atol=1e-4):
            raise Failure("changed weights: cc's output differs from the runtime's")
    finally:
        with open(c.weights, "wb") as f:
            f.write(data)
    other = [b for b in blobs(cache) if b != blob]  # the changed weights' entry
    if len(other) != 1:
        raise Failure("changed weights: want a second entry, found %s" % files(cache))
    os.unlink(other[0])
    os.unlink(other[0][:-5] + ".sha256")
    print("  one float changed: missed, the new numbers (the runtime's)")
    spoils = [("changed in place", spoil_middle),
              ("a symbolic link", lambda b: (shutil.copy(b, b + ".x"), os.unlink(b), os.symlink(b + ".x", b))),
              ("group-writable", lambda b: os.chmod(b, 0o620))]
    if os.geteuid() == 0:
        spoils.append(("given away", lambda b: os.chown(b, 1, 1)))
    for what, spoil in spoils:
        b = check_packed_entry(cache)
        spoil(b)
        if packed_run(c, cache, "tcc", r"packed weights: packed( \(key memoized\))?", what) != want["tcc"]:
            raise Failure("%s: the output differs from the cache-less run's bytes" % what)
        if os.path.exists(b + ".x"):
            os.unlink(b + ".x")
        check_packed_entry(cache)
        print("  entry %s -> refused, rebuilt" % what)
    p = subprocess.run([c.ff, "cache", "--clean"], capture_output=True, text=True,
                       env=dict(os.environ, XDG_CACHE_HOME=cache))
    must(p)
    if files(cache):
        raise Failure("cache --clean left %s" % files(cache))
    print("  cache --clean removed it")
    check_packed_rss(c)
    check_packed_bound(c)


def check_packed_bound(c):
    """a big model's packed weights (a sparse 300 MB KEY.blob, used an hour ago) and a build of another model"""
    for bound, kept in ((None, True), ("256", False)):
        cache = c.cache("bound%s" % bound)
        os.makedirs(os.path.join(cache, "fixformer"), mode=0o700)
        big = os.path.join(cache, "fixformer", "f" * 32 + ".blob")
        with open(big, "wb") as f:
            f.truncate(300 << 20)
        with open(big[:-5] + ".sha256", "w") as f:
            f.write("0" * 64 + "\n")
        for path in (big, big[:-5] + ".sha256"):
            os.utime(path, (time.time() - 3600,) * 2)
        c.ok(c.run(cache, env={"FIXFORMER_CACHE_MAX_MB": bound} if bound else None), "bound %s" % bound)
        if os.path.exists(big) != kept:
            raise Failure("FIXFORMER_CACHE_MAX_MB=%s: the 300 MB entry was %s" % (bound, "removed" if kept else "kept"))
    print("  default bound: a 300 MB entry kept beside a new build; FIXFORMER_CACHE_MAX_MB=256: removed")


LLAMA = """return { name = "%s", arch = "decoder-only", d_model = %d, heads = %d, d_ff = %d, layers = %d,
  norm = "pre", norm_kind = "rmsnorm", final_norm = true, eps = 1e-5, activation = "swiglu", bias = false,
  vocab = %d, positional = "rope", scale_embeddings = false, tie_embeddings = true, max_seq = 64 }
"""


def peak_rss(c, cache, model, weights, cached, engine="cc"):
    """a start that decodes 2 ids: (its peak RSS in bytes, FIXFORMER_REPORT_RSS's VmHWM: the process's own from
    its exec on; wait4's rusage would count this Python's pages, which a forked child holds until its exec)"""
    env = dict(os.environ, XDG_CACHE_HOME=cache, CC=c.fastcc, FIXFORMER_PACK_CACHE="1" if cached else "0",
               FIXFORMER_PACK_TRACE="1", FIXFORMER_REPORT_RSS="1")
    env.pop("FIXFORMER_CACHE_MAX_MB", None)
    p = subprocess.run([c.ff, "generate", model, "--weights", weights, "--tokens", "1 2 3", "--max-new", "2",
                        "--engine", engine], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise Failure("%s: exit %d: %s" % (model, p.returncode, p.stderr.strip()[-2000:]))
    said = [ln for ln in p.stderr.splitlines() if ln.startswith("packed weights:")]
    return int(re.search(r"^peak RSS: ([0-9]+) kB$", p.stderr, re.M).group(1)) * 1024, said, p.stdout


def split_projections(src, dst):
    """src's fused in_proj_weight and linear1.weight written apart, as Meta and Hugging Face keep them
    (q_proj, k_proj, v_proj; gate_proj, up_proj): fixformer fuses them when it reads the file"""
    with open(src, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    tensors = []
    for name, e in sorted(head.items()):
        if name == "__metadata__":
            continue
        x = np.frombuffer(data[e["data_offsets"][0]:e["data_offsets"][1]], "<f4").reshape(e["shape"])
        for suffix, parts in (("self_attn.in_proj_weight", ("q_proj", "k_proj", "v_proj")),
                              ("linear1.weight", ("gate_proj", "up_proj"))):
            if name.endswith(suffix):
                base = name[:-len(suffix)] + ("self_attn." if "self_attn" in suffix else "")
                tensors += [(base + p + ".weight", t) for p, t in zip(parts, np.split(x, len(parts)))]
                break
        else:
            tensors.append((name, x))
    head, at = {}, 0
    for name, t in tensors:
        head[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [at, at + t.nbytes]}
        at += t.nbytes
    text = json.dumps(head).encode()
    text += b" " * (-len(text) % 8)  # the data 8-byte aligned, as safetensors writes it
    with open(dst, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(t.tobytes() for _, t in tensors))


def check_packed_rss(c):
    """Peak RSS on a hit: the blob (mapped, every page read by decoding), plus what any start holds (measured: the
    same start of a model with 0.5 MB of weights); 0.3 x the blob for what grows with the model (its KV cache,
    logits, generated code: about 4 MB here).  A start that walked the float32 file too would hold 2 x the blob.  The
    first start, which packs into the new entry, and a cache-less one, which packs in memory, stay within the same
    bound: the file's pages leave the resident set as they are packed.  The runtime engine, which reads every float
    of the mapped file on each step, shows that the measure sees a mapped file's pages."""
    cache = c.cache("packed_rss")
    runs, first = {}, {}
    for name, shape in (("tiny", (32, 2, 64, 1, 4000)), ("s15m", (288, 6, 768, 6, 32000)), ("apart", None)):
        model, weights = os.path.join(c.tmp, name + ".lua"), os.path.join(c.tmp, name + ".safetensors")
        if shape:
            with open(model, "w") as f:
                f.write(LLAMA % ((name,) + shape))
            must(subprocess.run([c.ff, "init", model, "-o", weights], capture_output=True, text=True))
        else:  # the same weights, q/k/v and gate/up apart: fused on reading, deferred until someone reads them
            model = os.path.join(c.tmp, "s15m.lua")
            split_projections(os.path.join(c.tmp, "s15m.safetensors"), weights)
        settle(weights)
        cold = peak_rss(c, cache, model, weights, True)
        runs[name], first[name] = peak_rss(c, cache, model, weights, True), cold[0]
        if cold[1] != ["packed weights: packed"] or runs[name][1] != ["packed weights: cached (key memoized)"]:
            raise Failure("%s: want packed, then cached (key memoized); got %s, %s" % (name, cold[1], runs[name][1]))
        if cold[2] != runs[name][2] or not cold[2].strip():
            raise Failure("%s: the hit printed %r, the first start %r" % (name, runs[name][2], cold[2]))
    if runs["apart"][2] != runs["s15m"][2]:
        raise Failure("q/k/v and gate/up apart: %r, fused in the file: %r" % (runs["apart"][2], runs["s15m"][2]))
    s15m = os.path.join(c.tmp, "s15m.safetensors")
    less = peak_rss(c, cache, model, s15m, False)[0]
    reader = peak_rss(c, cache, model, s15m, False, engine="runtime")[0]
    blob, floats = max(os.path.getsize(b) for b in blobs(cache)), os.path.getsize(s15m)
    base, mb = runs["tiny"][0], 1 << 20
    print("  peak RSS: tiny model's hit %.1f MB; stories15M shape (blob %.1f MB): hit %.1f MB, projections apart "
          "%.1f MB, first start %.1f MB, cache-less %.1f MB (bound %.1f); the runtime engine %.1f MB" % (
              base / mb, blob / mb, runs["s15m"][0] / mb, runs["apart"][0] / mb, first["s15m"] / mb, less / mb,
              (base + 1.3 * blob) / mb, reader / mb))
    for name, rss in (("s15m's hit", runs["s15m"][0]), ("apart's hit", runs["apart"][0])):
        if rss >= base + 1.3 * blob:
            raise Failure("%s: peak RSS %.1f MB >= %.1f MB: the float32 weights are touched" % (
                name, rss / mb, (base + 1.3 * blob) / mb))
    for name, rss in (("the first start", first["s15m"]), ("a cache-less start", less)):
        if rss >= base + 1.3 * blob:
            raise Failure("%s: peak RSS %.1f MB >= %.1f MB: the float32 weights stay resident while packed" % (
                name, rss / mb, (base + 1.3 * blob) / mb))
    if reader <= base + 0.8 * floats:
        raise Failure("the runtime engine's peak RSS %.1f MB <= %.1f MB: the measure does not see the weights" % (
            reader / mb, (base + 0.8 * floats) / mb))


CHECKS = [("folder", check_folder), ("entries", check_entries), ("processes", check_processes), ("key", check_key),
          ("failures", check_failures), ("tidy", check_tidy)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--threads-test")
    ap.add_argument("--check", default="all")
    args = ap.parse_args()
    more = [("valgrind", check_valgrind), ("packed", check_packed)]  # each its own ctest entry
    checks = CHECKS if args.check == "all" else [(n, f) for n, f in CHECKS + more if n == args.check]
    if not checks:
        ap.error("--check: unknown %s" % args.check)
    failed = 0
    os.environ["FIXFORMER_PACK_CACHE"] = "0"  # the checks of the compiled code count its files alone
    with tempfile.TemporaryDirectory() as tmp:
        c = Case(os.path.abspath(args.fixformer), tmp, args.threads_test and os.path.abspath(args.threads_test))
        for name, fn in checks:
            t = time.time()
            try:
                fn(c)
                print("%-9s ok (%.1f s)" % (name, time.time() - t))
            except Failure as e:
                failed += 1
                print("%-9s FAIL: %s" % (name, e))
            if os.path.exists(c.marker):
                os.unlink(c.marker)
        for root, dirs, _ in os.walk(tmp):  # folders the checks made unwritable or gave away
            for d in dirs:
                p = os.path.join(root, d)
                if not os.path.islink(p):
                    os.chmod(p, stat.S_IRWXU)
    print("%d passed, %d failed" % (len(checks) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
