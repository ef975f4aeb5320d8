"""What the tests/io scripts share: the remat binary they are given, the
settings of a small llama3 debug run (batch 2 x seq 64, 2 threads), check()
with the list of failures it keeps, and running remat with them.

Imported by the scripts beside it (Python puts a script's own folder on
sys.path), which also reach tests/oracle's safetensors helpers through it.
"""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))

REMAT = sys.argv[1]
SMALL = ["--config", "configs/llama3_debug.toml", "--training.local_batch_size", "2",
         "--training.seq_len", "64", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11",
         "--training.threads", "2"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, tmp, extra=()):
    """remat `args` on the small run's settings (and `extra`), writing under `tmp`."""
    return subprocess.run([REMAT, *args, *SMALL, *extra, "--job.dump_folder", str(tmp)],
                          capture_output=True, text=True)


def exit_status():
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0
