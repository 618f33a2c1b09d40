#!/usr/bin/python3
"""The documentation's runnable blocks, run: a documented path cannot rot.

Finds every fenced block whose info string is `console runnable` in
README.md and docs/*.md, runs its commands in order in one `sh` in a fresh
folder, and compares what each prints with what the block shows
(docs/tests.md, "Docs that are run", is the convention):

  $ a command             a line starting with "$ " is a command
  > its next line         "> " lines right after it continue it (as sh's PS2)
  what it prints          the lines up to the next command: stdout and stderr
                          in a terminal's order (stdout line-buffered)
  ...                     a line "..." matches any number of lines
  took <…> ms             "<…>" inside a line matches any characters
  [exit 1]                a non-zero exit status is a last line [exit N]

Trailing blanks are ignored.  The folder holds the repository's files (git
ls-files, untracked ones included: hard links to one copy made for the run,
which a block may replace but not change in place) with build/ a link to the
real build folder and that folder's `fixformer` first on PATH; HOME,
XDG_CACHE_HOME (shared by the blocks of one run: the cc engine compiles its
kernels once) and TMPDIR are private to the run.  Blocks run two at a time.
The first mismatch of each block is reported as FILE:LINE with both outputs.

  docs.py --fixformer BUILD/fixformer [--jobs 2] [--only FILE[:LINE]] [--list]
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANY = "<…>"
BLOCK_SECONDS = 300
# stdout line-buffered in every C program the block runs, as on a terminal, so that lines written to
# stdout and stderr come in a terminal's order (Python: PYTHONUNBUFFERED)
STDBUF = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []


class Command:
    def __init__(self, line, text):
        self.line, self.text, self.expected = line, text, []


class Block:
    def __init__(self, name, line):
        self.name, self.line, self.commands = name, line, []

    def where(self, line=None):
        return "%s:%d" % (self.name, line or self.line)


def parse(path, name):
    """The runnable blocks of one Markdown file (name: its path in the repository)."""
    blocks, block, fence = [], None, None
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        if fence is None:
            m = re.match(r"^(```+|~~~+)\s*(.*)$", line)
            if m:
                fence = m.group(1)
                words = m.group(2).split()
                if words[:1] == ["console"] and "runnable" in words[1:]:
                    block = Block(name, n)
            continue
        if line.strip() == fence:
            if block is not None:
                if not block.commands:
                    raise ValueError("%s: a runnable block without a command" % block.where())
                blocks.append(block)
            fence, block = None, None
            continue
        if block is None:
            continue
        if line.startswith("$ "):
            block.commands.append(Command(n, line[2:]))
        elif line.startswith("> ") and block.commands and not block.commands[-1].expected:
            block.commands[-1].text += "\n" + line[2:]
        elif not block.commands:
            raise ValueError("%s: output before the first command" % block.where(n))
        else:
            block.commands[-1].expected.append(line)
    if fence is not None and block is not None:
        raise ValueError("%s: the block is not closed" % block.where())
    return blocks


def line_pattern(expected):
    """A regex for one expected line: <…> matches any characters."""
    return re.compile(".*?".join(re.escape(p) for p in expected.rstrip().split(ANY)) + r"\Z", re.S)


def first_mismatch(expected, actual):
    """None if actual matches expected ("..." any lines); else the index into expected where the best
    attempt failed, or len(expected) when actual has lines left over."""
    actual = [a.rstrip() for a in actual]
    pats = [None if e.strip() == "..." else line_pattern(e) for e in expected]
    best = [0]
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        best[0] = max(best[0], i)
        if i == len(pats):
            ok = j == len(actual)
        elif pats[i] is None:
            ok = any(match(i + 1, k) for k in range(j, len(actual) + 1))
        else:
            ok = j < len(actual) and bool(pats[i].match(actual[j])) and match(i + 1, j + 1)
        memo[(i, j)] = ok
        return ok

    return None if match(0, 0) else best[0]


def source_files(src):
    """The repository's files, as a user's clone has them: tracked and untracked but not ignored."""
    try:
        out = subprocess.run(["git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        names = sorted(set(n for n in out.decode().split("\0") if n))
    except (OSError, subprocess.CalledProcessError):  # a source archive: everything but build output
        names = []
        for d, dirs, files in os.walk(src):
            dirs[:] = [x for x in dirs if not (x.startswith("build") or x in (".git", "node_modules"))]
            names += [os.path.relpath(os.path.join(d, f), src) for f in files]
    return [n for n in names if os.path.isfile(os.path.join(src, n)) and not n.startswith("build/")]


class Copy:
    """The run's copy of the repository, which the blocks' folders link to.  A block that changes one
    of its files in place (instead of writing a new file) changes it for every block: that is found
    after each block, reported, and the file copied again."""

    def __init__(self, src, names, folder):
        self.src, self.names, self.folder, self.lock = src, names, folder, threading.Lock()
        for n in names:
            os.makedirs(os.path.dirname(os.path.join(folder, n)), exist_ok=True)
            shutil.copy2(os.path.join(src, n), os.path.join(folder, n))
        self.seen = {n: self.identity(n) for n in names}

    def identity(self, n):
        st = os.stat(os.path.join(self.folder, n))
        return st.st_ino, st.st_size, st.st_mtime_ns

    def changed(self):
        """The files changed in place since the last call, copied again."""
        with self.lock:
            out = [n for n in self.names if self.identity(n) != self.seen[n]]
            for n in out:
                tmp = os.path.join(self.folder, n + ".docs-tmp")
                shutil.copy2(os.path.join(self.src, n), tmp)
                os.replace(tmp, os.path.join(self.folder, n))
                self.seen[n] = self.identity(n)
            return out


def make_folder(repo, names, build, folder):
    """A fresh folder with the repository's files, hard links to the run's copy (cheap: a block
    replaces a file by writing a new one, as fixformer and editors do), and build/ linked to the real
    build folder."""
    for n in names:
        dst = os.path.join(folder, n)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.link(os.path.join(repo, n), dst)
    os.symlink(build, os.path.join(folder, "build"))


def run_block(block, copy, build, env, tmp, index):
    """Runs the block's commands in one sh; returns [(command, output lines)], the seconds taken and
    the repository files changed in place while it ran."""
    folder = os.path.join(tmp, "block%03d" % index)
    os.makedirs(folder)
    make_folder(copy.folder, copy.names, build, folder)
    mark = "@@docs.py-%d-status@@" % os.getpid()
    script = ["exec </dev/null 2>&1"]
    for c in block.commands:
        script += [c.text, "printf '%s %%d\\n' \"$?\"" % mark]
    start = time.time()
    try:
        p = subprocess.run(STDBUF + ["sh", "-c", "\n".join(script)], cwd=folder, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=BLOCK_SECONDS)
        out = p.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode("utf-8", "replace") + "\n[docs.py: the block ran over %d s]\n" % BLOCK_SECONDS
    took = time.time() - start
    results, rest = [], out
    for c in block.commands:
        m = re.search(re.escape(mark) + r" (\d+)\n", rest)
        if not m:  # the shell stopped (exit, a timeout): what is left belongs to this command
            results.append((c, rest.split("\n") if rest else []))
            break
        chunk, rest = rest[:m.start()], rest[m.end():]
        lines = chunk[:-1].split("\n") if chunk.endswith("\n") else (chunk.split("\n") if chunk else [])
        if m.group(1) != "0":
            lines.append("[exit %s]" % m.group(1))
        results.append((c, lines))
    shutil.rmtree(folder, ignore_errors=True)
    return results, took, copy.changed()


def check(block, results):
    """The first mismatch of a block as a message, or None."""
    for c, actual in results:
        bad = first_mismatch(c.expected, actual)
        if bad is None:
            continue
        first_output_line = c.line + c.text.count("\n") + 1
        if bad < len(c.expected):
            where, what = block.where(first_output_line + bad), "expected %r" % c.expected[bad]
        else:
            where, what = block.where(c.line), "printed more than the block shows"
        msg = ["%s: `$ %s`: %s" % (where, c.text.split("\n")[0], what)]
        msg += ["  expected (%s):" % block.where(c.line)] + ["    " + e for e in c.expected]
        msg += ["  printed:"] + ["    " + a for a in actual]
        return "\n".join(msg)
    if len(results) < len(block.commands):
        return "%s: the shell stopped after %d of %d commands" % (block.where(), len(results), len(block.commands))
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", required=True, help="the built fixformer; its folder is the build folder")
    ap.add_argument("--source", default=ROOT, help="the repository (default: this one)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", help="FILE or FILE:LINE (the line of the block's fence)")
    ap.add_argument("--list", action="store_true", help="list the runnable blocks and exit")
    args = ap.parse_args()
    src = os.path.abspath(args.source)
    fixformer = os.path.abspath(args.fixformer)
    build = os.path.dirname(fixformer)

    blocks = []
    for path in [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md"))):
        try:
            blocks += parse(path, os.path.relpath(path, src))
        except ValueError as e:
            print("docs: %s" % e)
            return 1
    if args.only:
        blocks = [b for b in blocks if b.where() == args.only or b.where().split(":")[0] == args.only]
    if args.list:
        for b in blocks:
            print("%s  %d commands" % (b.where(), len(b.commands)))
        return 0
    if not blocks:
        print("docs: no runnable block found%s" % (" for " + args.only if args.only else ""))
        return 1

    names = source_files(src)
    start = time.time()
    failed = 0
    with tempfile.TemporaryDirectory(prefix="fixformer-docs-") as tmp:
        home, cache, tmpdir, bindir = (os.path.join(tmp, d) for d in ("home", "cache", "tmp", "bin"))
        for d in (home, cache, tmpdir, bindir):
            os.makedirs(d, mode=0o700)
        os.symlink(fixformer, os.path.join(bindir, "fixformer"))
        copy = Copy(src, names, os.path.join(tmp, "repo"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("FIXFORMER_")}
        env.update(PATH=bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"), HOME=home,
                   XDG_CACHE_HOME=cache, TMPDIR=tmpdir, LC_ALL="C.UTF-8", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1",
                   OPENBLAS_NUM_THREADS="1",
                   QEMU_UNSET_ENV="LD_PRELOAD")  # qemu-user's guests: not the host's stdbuf library
        env.pop("CDPATH", None)
        if os.geteuid() == 0:  # (CI runs as root, which Open MPI's mpirun refuses unless told)
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            jobs = [pool.submit(run_block, b, copy, build, env, tmp, i) for i, b in enumerate(blocks)]
            for b, job in zip(blocks, jobs):
                results, took, changed = job.result()
                problem = check(b, results)
                if changed:
                    problem = ((problem + "\n") if problem else "") + (
                        "%s: %s changed in place while this block ran (it, or one beside it: --jobs 1 says "
                        "which); write a new file instead (out/...)" % (b.where(), ", ".join(changed)))
                failed += problem is not None
                print("%-4s %-32s %2d commands %6.1f s" % ("FAIL" if problem else "ok", b.where(),
                                                         len(b.commands), took))
                if problem:
                    print(problem)
    commands = sum(len(b.commands) for b in blocks)
    print("docs: %d blocks, %d commands, %d failed, in %.1f s" % (len(blocks), commands, failed,
                                                                   time.time() - start))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
