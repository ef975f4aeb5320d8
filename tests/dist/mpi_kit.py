"""What the 2-rank test scripts share: the mpirun prefix, check() with the
list of failures it keeps, running a command that must succeed, comparing
metrics and finding a rank's process.

Imported by the scripts beside it (they put this folder on sys.path, as
Python does for a script's own folder).
"""

import os
import subprocess
import sys
import time

# Tests run as root in CI and on fewer cores than ranks.
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]

failures = []


def check(what, ok, detail=""):
    """Prints one result line; a failed check is remembered in `failures`."""
    print(f"{'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def run(cmd, what, timeout=300, status=0):
    """Runs `cmd`; raises, with the end of its output, unless it exits with
    `status` (None: any status). Returns the CompletedProcess."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if status is not None and proc.returncode != status:
        raise RuntimeError(f"{what} exited {proc.returncode}, expected {status}:\n"
                           f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def output(cmd, what, timeout=300):
    """The stdout of `cmd`, which must exit 0."""
    return run(cmd, what, timeout).stdout


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def worst(a, b):
    """The largest relative difference of loss or grad_norm over the steps
    of two runs' [(loss, grad_norm)] (1 when there are none)."""
    return max((max(rel(x[0], y[0]), rel(x[1], y[1])) for x, y in zip(a, b)), default=1)


def rank_pid(mpirun_pid, rank, deadline):
    """The pid of `rank` among mpirun's children (their environment names it)."""
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
            except (OSError, ValueError, IndexError):
                continue
            if ppid == mpirun_pid and f"OMPI_COMM_WORLD_RANK={rank}".encode() in env:
                return int(pid)
        time.sleep(0.1)
    raise RuntimeError(f"rank {rank} of mpirun {mpirun_pid} not found")


def main_guarded(main):
    """Runs a script's main() as its exit status; a command that failed or
    timed out (run() raised) is a test failure with its message, exit 1,
    instead of a traceback."""
    try:
        sys.exit(main())
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}")
        sys.exit(1)
