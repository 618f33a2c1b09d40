"""The programs a test runs from PATH (cross compilers, qemu)."""
import shutil


def need(tools):
    """Fails naming the Debian package of each tool not on PATH (scripts/deps test installs them)."""
    missing = ["%s (Debian package %s)" % (t, pkg) for t, pkg in tools if shutil.which(t) is None]
    if missing:
        raise RuntimeError("missing, run scripts/deps test: " + ", ".join(missing))
