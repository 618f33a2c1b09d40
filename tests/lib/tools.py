"""The programs a test runs from PATH (cross compilers, qemu)."""
import shutil


def need(tools):
    """Fails naming the Debian package of each tool not on PATH (scripts/deps test installs them)."""
    missing = ["%s (Debian package %s)" % (t, pkg) for t, pkg in tools if shutil.which(t) is None]
    if missing:
        raise RuntimeError("missing, run scripts/deps test: " + ", ".join(missing))


def on_terminal(cmd, env=None):
    """cmd with stderr a terminal (a pty) and stdout a pipe: its exit status, its stdout, and the
    lines stderr shows, each as the terminal leaves it (what follows its last carriage return)."""
    import os
    import pty
    import subprocess
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    said = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        said += chunk
    os.close(master)
    out = proc.stdout.read().decode()
    lines = [line.rstrip("\r").split("\r")[-1] for line in said.decode().strip().split("\n") if line]
    return proc.wait(), out, lines
