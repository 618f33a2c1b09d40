"""The ISA table as fixformer reports it (`fixformer info --isas`, from
kernels/isas.h): the tests take the ISAs, their flags and which of them this
machine runs from there, never from copies of their own."""

import subprocess


def isa_table(ff):
    """[(name, mr, nr, flags as a list, runs here)] in the table's order (generic first)."""
    out = subprocess.run([ff, "info", "--isas"], check=True, capture_output=True, text=True).stdout
    rows = []
    for line in out.splitlines()[1:]:
        name, mr, nr, runs, *flags = line.split()
        rows.append((name, int(mr), int(nr), flags, runs == "yes"))
    if not rows or rows[0][0] != "generic":
        raise RuntimeError("fixformer info --isas: unexpected table %r" % out)
    return rows


def host_isas(ff):
    """The ISAs whose kernels this machine runs, generic first."""
    return [name for name, _, _, _, runs in isa_table(ff) if runs]
