#!/usr/bin/python3
"""The NEON bf16/int8 matrix kernels under qemu: tests/test_qkernels.c built for
aarch64 with -DFF_QTEST_DIRECT (it links kernels/gemm_neon.c and gemm_generic.c,
each checked against kernels/prototypes.h as the host build does), strict
(-std=c99 -Wall -Wextra -Werror -pedantic), -static, and run under qemu-aarch64:
the same cases and reference as the native test (label cross).

  qkernels_cross.py [--cc aarch64-linux-gnu-gcc] [--qemu qemu-aarch64]
"""
import argparse
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STRICT = ["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-O2"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cc", default="aarch64-linux-gnu-gcc")
    ap.add_argument("--qemu", default="qemu-aarch64")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        objs = []
        units = [(os.path.join(HERE, "test_qkernels.c"), ["-DFF_QTEST_DIRECT"]),
                 (os.path.join(HERE, "kernel_data.c"), [])]
        for isa in ("neon", "generic"):
            units.append((os.path.join(ROOT, "kernels", "gemm_%s.c" % isa),
                          ["-include", os.path.join(ROOT, "kernels", "prototypes.h"), "-DFF_SUFFIX=" + isa]))
        for i, (src, flags) in enumerate(units):
            obj = os.path.join(tmp, "%d.o" % i)
            subprocess.run([a.cc] + STRICT + flags + ["-c", src, "-o", obj], check=True)
            objs.append(obj)
        exe = os.path.join(tmp, "test_qkernels")
        subprocess.run([a.cc, "-static", "-o", exe] + objs + ["-lm"], check=True)
        out = subprocess.run([a.qemu, exe], stdout=subprocess.PIPE, universal_newlines=True)
        print(out.stdout, end="")
        if out.returncode or "neon: " not in out.stdout or "neon: not run" in out.stdout:
            print("qkernels_cross: FAIL (exit %d)" % out.returncode)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
