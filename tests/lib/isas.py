"""The ISA table as fixformer reports it (`fixformer info --isas`, from
kernels/isas.h): the tests take the ISAs, their flags, what runs them and
which of them this machine runs from there, never from copies of their own."""

import collections
import platform
import subprocess

# cpu: the CPU features it needs at run time, targets: the architectures it
# runs on (empty: all), flags: the C compiler's, lists; runs: on this machine
Isa = collections.namedtuple("Isa", "name mr nr runs cpu targets flags")


def isa_table(ff):
    """[Isa] in the table's order (generic first)."""
    out = subprocess.run([ff, "info", "--isas"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines()[1:]:
        name, mr, nr, runs, cpu, targets, *flags = line.split()
        rows.append(Isa(name, int(mr), int(nr), runs == "yes", [] if cpu == "-" else cpu.split(","),
                        [] if targets == "any" else targets.split(","), flags))
    if not rows or rows[0].name != "generic":
        raise RuntimeError("fixformer info --isas: unexpected table %r" % out)
    return rows


def host_isas(ff):
    """The ISAs whose kernels this machine runs, generic first."""
    return [row.name for row in isa_table(ff) if row.runs]


def runs_on_host(row):
    """Whether the ISA's code runs on this machine's architecture (its CPU may still lack a feature)."""
    return not row.targets or platform.machine() in row.targets


# Debian's names of architectures, where they differ (its cross C libraries' packages)
DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64", "i686": "i386"}


def compilers(row):
    """The compilers of the ISA's emitted kernels here, [(argv with its flags, Debian packages)]: gcc and
    clang where it runs on this architecture, else the cross gcc of its first target and clang for
    that target (its C library the cross gcc's)."""
    if runs_on_host(row):
        return [(["gcc"] + row.flags, "gcc"), (["clang"] + row.flags, "clang")]
    arch = row.targets[0]
    pkg = "gcc-%s-linux-gnu libc6-dev-%s-cross" % (arch, DEBIAN_ARCH.get(arch, arch))
    return [(["%s-linux-gnu-gcc" % arch] + row.flags, pkg),
            (["clang", "--target=%s-linux-gnu" % arch] + row.flags, "clang " + pkg)]
