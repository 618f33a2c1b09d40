#!/usr/bin/python3
"""What `emit --embed` and compiling its NAME_weights.c cost (docs/generated-code.md
"Embedded weights"), measured on llama2.c's stories15M and stories110M shapes
(bench/models/) with random weights from `fixformer init`, in f32, bf16 and int8:

  emit     `fixformer emit --weights W --embed`: peak RSS (/usr/bin/time's maximum
           resident set), CPU and wall time, and the peak against the weights
           file (the bound is 1.5 x); `emit --weights` (the blob) likewise;
  gcc      `gcc -O2 -c NAME_weights.c`: peak RSS, CPU and wall time.  A compile
           whose memory, estimated from the smaller shape's bytes per weight
           word, exceeds --gcc-limit (default 60 % of MemAvailable) is not run
           and the estimate is printed instead: the machine is shared.

  bench/embed.py [--fixformer build/fixformer] [--shapes stories15M,stories110M]
                 [--dtypes f32,bf16,int8] [--gcc-limit GB] [--cc gcc] [--out F.json]

Needs about 2 GB of free disk in $TMPDIR (110M's f32 text is 1.7 GB) and,
for 110M in int8, some 7 GB of memory for gcc.  A measurement, not a test:
it prints a table; the exit status is 1 when a command fails or an emit's
peak is above 1.5 x its weights file.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHAPES = ("stories15M", "stories110M")
DTYPES = ("f32", "bf16", "int8")
BOUND = 1.5  # the generator's peak RSS against the weights file


def timed(cmd, env=None):
    """cmd under /usr/bin/time: (wall s, CPU s, peak RSS bytes, stderr); exits on failure."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as t:
        p = subprocess.run(["/usr/bin/time", "-o", t.name, "-f", "%e %U %S %M"] + cmd, capture_output=True,
                           text=True, env=env)
        if p.returncode:
            raise SystemExit("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-2000:]))
        wall, user, system, kb = t.read().split()[-4:]
    return float(wall), float(user) + float(system), int(kb) * 1024, p.stderr


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def gb(n):
    return "%.2f GB" % (n / 1e9) if n >= 1e9 else "%.0f MB" % (n / 1e6)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixformer", default=os.path.join(ROOT, "build", "fixformer"))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--gcc-limit", type=float, help="GB a gcc run may be expected to take (default: 60%% of "
                    "MemAvailable at the start)")
    ap.add_argument("--cc", default="gcc")
    ap.add_argument("--out", help="also write the rows as JSON")
    a = ap.parse_args()
    limit = a.gcc_limit * 1e9 if a.gcc_limit else 0.6 * mem_available()
    cc_version = subprocess.run([a.cc, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print("# %s; gcc runs expected above %s are not run; load %.1f" % (cc_version, gb(limit), os.getloadavg()[0]))
    tmp = tempfile.mkdtemp(prefix="ff-embed-bench-")
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    rows, per_word = [], {}  # per_word[dtype]: gcc's bytes per weight word, from the last compile
    try:
        for shape in a.shapes.split(","):
            lua = os.path.join(ROOT, "bench", "models", shape + ".lua")
            weights = os.path.join(tmp, shape + ".safetensors")
            timed([a.fixformer, "init", lua, "-o", weights, "--seed", "1"], env)
            size = os.path.getsize(weights)
            for dtype in a.dtypes.split(","):
                row = {"shape": shape, "dtype": dtype, "weights_file": size}
                out = os.path.join(tmp, "out")
                _, _, row["blob_rss"], _ = timed([a.fixformer, "emit", lua, "-o", out, "--weights", weights, "--dtype",
                                                  dtype, "-q"], env)
                name = [f for f in os.listdir(out) if f.endswith(".weights")][0][:-len(".weights")]
                words = (os.path.getsize(os.path.join(out, name + ".weights")) - 64) // 4
                shutil.rmtree(out)
                row["emit_wall"], row["emit_cpu"], row["emit_rss"], _ = timed(
                    [a.fixformer, "emit", lua, "-o", out, "--weights", weights, "--embed", "--dtype", dtype, "-q"], env)
                text = os.path.join(out, name + "_weights.c")
                row["text"], row["words"] = os.path.getsize(text), words
                row["within_bound"] = row["emit_rss"] <= BOUND * size
                estimate = per_word.get(dtype, 0) * words
                if estimate > limit:
                    row["gcc_estimate"] = estimate
                else:
                    obj = os.path.join(tmp, "w.o")
                    row["gcc_wall"], row["gcc_cpu"], row["gcc_rss"], _ = timed([a.cc, "-O2", "-c", text, "-o", obj])
                    per_word[dtype] = row["gcc_rss"] / words
                    os.unlink(obj)
                shutil.rmtree(out)
                rows.append(row)
                gcc = ("%s, %.0f s CPU (%.0f s)" % (gb(row["gcc_rss"]), row["gcc_cpu"], row["gcc_wall"])
                       if "gcc_rss" in row else "not run: about %s" % gb(row["gcc_estimate"]))
                print("| %s %s | %s | %s (%.2f x), %.1f s CPU (%.1f s) | %s | %s | %s |" % (
                    shape, dtype, gb(size), gb(row["emit_rss"]), row["emit_rss"] / size, row["emit_cpu"],
                    row["emit_wall"], gb(row["blob_rss"]), gb(row["text"]), gcc), flush=True)
            os.unlink(weights)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("# load %.1f at the end" % os.getloadavg()[0])
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"cc": cc_version, "rows": rows}, f, indent=1)
    over = [r for r in rows if not r["within_bound"]]
    if over:
        print("above %.1f x the weights: %s" % (BOUND, ", ".join("%s %s" % (r["shape"], r["dtype"]) for r in over)))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
