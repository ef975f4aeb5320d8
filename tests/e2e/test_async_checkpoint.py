"""checkpoint.async_mode (torchtitan's; README "Saving in the background").

- With async_mode "async" (and "async_with_pinned_mem"), every checkpoint
  is byte for byte the one a run with "disabled" writes, and so is every
  logged step's loss and grad_norm.
- The interval saves are written by a child process while the run trains:
  seen in /proc while a run saving every step goes on (a child of the run
  that is remat), never with "disabled".
- A save that fails in the background (its file exceeds RLIMIT_FSIZE) stops
  the run at the next step boundary with exit 1 and a message naming the
  step and async_mode, after the child's own error; nothing of that step is
  left, and the next run saves it.
- Under mpirun (2 ranks, and 1) the saves stay synchronous, the run says so,
  and the checkpoints are those of "disabled".
- An unknown async_mode is exit 2 naming the key and the values expected.

Usage: test_async_checkpoint.py <path-to-remat>
"""
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]  # as tests/dist/mpi_kit.py
REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "llama3_debug.toml")
SMALL = ["--training.seq_len", "32", "--training.local_batch_size", "2", "--model.dim", "64",
         "--model.n_heads", "4", "--model.n_kv_heads", "4", "--metrics.log_freq", "1",
         "--metrics.peak_flops", "1e11", "--checkpoint.enable", "true",
         "--checkpoint.keep_latest_k", "0"]
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)


def command(dump, mode, *extra):
    return [REMAT, "train", "--config", CONFIG, *SMALL, "--job.dump_folder", dump,
            "--metrics.jsonl_path", f"{dump}.jsonl", "--checkpoint.async_mode", mode, *extra]


def train(dump, mode, *extra, limit=None):
    def limit_file_size():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run(command(dump, mode, *extra), capture_output=True, text=True,
                          timeout=300, preexec_fn=limit_file_size)


def metrics(dump):
    with open(f"{dump}.jsonl") as f:
        return [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, f) if "loss" in r]


def checkpoints(dump):
    folder = Path(dump) / "checkpoint"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def children_seen(cmd):
    """Runs cmd, watching /proc for child processes of it that are remat
    (a save in the background), until it ends: (process, how many seen)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = set()
    while proc.poll() is None:
        for task in Path(f"/proc/{proc.pid}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for kid in kids:
                try:
                    if Path(f"/proc/{kid}/exe").resolve() == Path(REMAT).resolve():
                        seen.add(kid)
                except OSError:
                    pass
        time.sleep(0.002)
    proc.communicate()
    return proc, len(seen)


def main():
    with tempfile.TemporaryDirectory(prefix="remat_async_") as tmp:
        base = os.path.join(tmp, "disabled")
        out = train(base, "disabled", "--training.steps", "6", "--checkpoint.interval", "2")
        check("disabled: the run succeeds", out.returncode == 0, out.stderr[-500:])
        for mode in ("async", "async_with_pinned_mem"):
            dump = os.path.join(tmp, mode)
            out = train(dump, mode, "--training.steps", "6", "--checkpoint.interval", "2")
            check(f"{mode}: the run succeeds", out.returncode == 0, out.stderr[-500:])
            check(f"{mode}: every checkpoint is the synchronous run's, byte for byte",
                  checkpoints(dump) == checkpoints(base) and len(checkpoints(base)) == 3,
                  sorted(checkpoints(dump)))
            check(f"{mode}: every step's loss and grad_norm are the synchronous run's",
                  metrics(dump) == metrics(base) and len(metrics(base)) == 6)

        # A larger model, saving every step: the saves take a good part of a step.
        wider = ["--model.dim", "256", "--training.steps", "12", "--checkpoint.interval", "1"]
        proc, seen = children_seen(command(os.path.join(tmp, "watch_async"), "async", *wider))
        check("async: saves are written by child processes while the run trains",
              proc.returncode == 0 and seen >= 1, f"exit {proc.returncode}, {seen} children")
        proc, seen = children_seen(command(os.path.join(tmp, "watch_sync"), "disabled", *wider))
        check("disabled: no child process", proc.returncode == 0 and seen == 0,
              f"exit {proc.returncode}, {seen} children")

        dump = os.path.join(tmp, "fails")
        out = train(dump, "async", "--training.steps", "4", "--checkpoint.interval", "2",
                    limit=256 * 1024)
        check("a failed background save stops the run with exit 1, naming step and mode",
              out.returncode == 1 and "step 2" in out.stderr and
              "checkpoint.async_mode" in out.stderr and "step:  4" not in out.stdout,
              f"exit {out.returncode}: {out.stderr[-600:]}")
        check("the child's own error says why (the file-size limit)",
              "File too large" in out.stderr, out.stderr[-600:])
        left = sorted(checkpoints(dump))
        check("no file of that step is left (the failed write removed its temporary)",
              left == [], left)
        out = train(dump, "async", "--training.steps", "2", "--checkpoint.interval", "2")
        check("the next run saves step 2", out.returncode == 0 and
              sorted(checkpoints(dump)) == ["step-2.safetensors"], out.stdout[-500:])

        for ranks in (1, 2):
            saves = {}
            for mode in ("disabled", "async"):
                dump = os.path.join(tmp, f"mpi{ranks}_{mode}")
                out = subprocess.run(
                    [*MPIRUN, "-np", str(ranks), *command(
                        dump, mode, "--training.steps", "2", "--checkpoint.interval", "1",
                        "--parallelism.data_parallel_replicate_degree", str(ranks))],
                    capture_output=True, text=True, timeout=300)
                saves[mode] = checkpoints(dump) if out.returncode == 0 else out.stderr[-400:]
                if mode == "async":
                    check(f"mpirun -np {ranks}: async says the saves stay synchronous",
                          out.returncode == 0 and "not built for runs under mpirun" in out.stdout,
                          out.stdout[-400:] + out.stderr[-400:])
            check(f"mpirun -np {ranks}: the checkpoints are those of disabled",
                  saves["async"] == saves["disabled"] and len(saves["async"]) == 2)

        out = train(os.path.join(tmp, "bad"), "sometimes", "--training.steps", "2")
        check("an unknown async_mode is exit 2 naming the key and the values",
              out.returncode == 2 and "checkpoint.async_mode" in out.stderr and
              "async_with_pinned_mem" in out.stderr, out.stderr[-400:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
