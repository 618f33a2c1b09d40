#!/usr/bin/python3
"""The NEON bf16/int8 matrix kernels under qemu: tests/test_qkernels.c (bf16
and int8 weights), tests/test_compute_kernels.c (int8 and bf16 compute:
NEON's own tiles) and tests/test_train_kernels.c (training's pack, transpose
and ff_linear_ta, whose NEON form copies a tile's rows out of x^T) built for
aarch64 with -DFF_QTEST_DIRECT (each links the
kernels of every ISA of `fixformer info --isas` that runs on aarch64, neon and
generic, checked against kernels/prototypes.h as the host build does), strict
(-std=c99 -Wall -Wextra -Werror -pedantic), -static, and run under
qemu-aarch64: the same cases and reference as the native tests (label cross).

  qkernels_cross.py --fixformer BIN [--cc aarch64-linux-gnu-gcc] [--qemu qemu-aarch64]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(HERE, "lib"))
from isas import isa_table  # noqa: E402

ARCH = "aarch64"
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]
DOTPROD = ["-march=armv8.2-a+dotprod"]  # qemu-aarch64's default CPU (max) runs SDOT


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixformer", required=True)
    ap.add_argument("--cc", default="aarch64-linux-gnu-gcc")
    ap.add_argument("--qemu", default="qemu-aarch64")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        objs = []
        prototypes = os.path.join(ROOT, "kernels", "prototypes.h")
        isas = [row for row in isa_table(a.fixformer) if not row.cpu and (not row.targets or ARCH in row.targets)]
        # the header the host build writes (CMakeLists.txt), for the ISAs linked here
        with open(os.path.join(tmp, "ff_host_isas.h"), "w") as f:
            for row in isas:
                f.write('#define FF_SUFFIX %s\n#include "%s"\n#undef FF_SUFFIX\n' % (row.name, prototypes))
            f.write("#define FF_HOST_ISAS(X) %s\n" % " ".join("X(%s, 1)" % row.name for row in isas))
        kernels = []
        for row in isas:
            kernels.append((os.path.join(ROOT, "kernels", "gemm_%s.c" % row.name),
                            ["-include", prototypes, "-DFF_SUFFIX=" + row.name, "-DFF_TABLE_MR=%d" % row.mr,
                             "-DFF_TABLE_NR=%d" % row.nr] + row.flags))
        units = [(os.path.join(HERE, "kernel_data.c"), [])] + kernels
        # the kernels again for Armv8.2's dot product (NEON's int8 tile then sums with SDOT)
        dotprod = [(src, flags + DOTPROD) for src, flags in kernels]
        for i, (src, flags) in enumerate(units + dotprod):
            obj = os.path.join(tmp, "%d.o" % i)
            subprocess.run([a.cc] + STRICT + flags + ["-c", src, "-o", obj], check=True)
            objs.append(obj)
        objs, objs_dotprod = objs[:len(units)], objs[:1] + objs[len(units):]
        failed = 0
        for test, wants, linked in (
                ("test_qkernels", ["neon: "], objs),
                ("test_compute_kernels", ["neon int8: ", "neon bf16: "], objs),
                ("test_compute_kernels", ["neon int8: "], objs_dotprod),
                ("test_train_kernels", ["linear_ta as transpose + linear on %d ISA(s)" % len(isas)], objs)):
            obj = os.path.join(tmp, test + ".o")
            subprocess.run([a.cc] + STRICT + ["-DFF_QTEST_DIRECT", "-I", tmp, "-c", os.path.join(HERE, test + ".c"),
                                             "-o", obj], check=True)
            exe = os.path.join(tmp, test)
            subprocess.run([a.cc, "-static", "-o", exe, obj] + linked + ["-lm"], check=True)
            out = subprocess.run([a.qemu, exe], stdout=subprocess.PIPE, universal_newlines=True)
            name = test + (" (dotprod)" if linked is objs_dotprod else "")
            print("%s:\n%s" % (name, out.stdout), end="")
            if out.returncode or any(w not in out.stdout for w in wants) or "neon: not run" in out.stdout:
                print("qkernels_cross: %s FAIL (exit %d)" % (name, out.returncode))
                failed = 1
        if failed:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
