"""checkpoint.keep_latest_k (torchtitan's; README "Checkpoints"), on one process.

- 5 steps saving every step with keep_latest_k 2: step-4 and step-5 are left,
  the run names each checkpoint it removed, and running the same command
  again with training.steps 7 resumes from step-5 (the latest) and leaves
  step-6 and step-7;
- the default keeps 10: 12 steps saving every step leave steps 3 to 12;
- 0 keeps every checkpoint;
- a run resumed from an earlier step into a folder holding later
  checkpoints removes only older ones than its save: the later ones stay;
- the user's files in the folder, and in a removed step folder, stay;
- a negative keep_latest_k is exit 2 naming the key, before any file exists.

Usage: test_keep_latest_k.py <path-to-remat>
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "llama3_debug.toml")
SMALL = ["--training.seq_len", "32", "--training.local_batch_size", "2", "--model.dim", "64",
         "--model.n_heads", "4", "--model.n_kv_heads", "4", "--metrics.log_freq", "1",
         "--metrics.peak_flops", "1e11", "--checkpoint.enable", "true",
         "--checkpoint.interval", "1"]
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)


def train(dump, *extra):
    proc = subprocess.run([REMAT, "train", "--config", CONFIG, *SMALL, "--job.dump_folder", dump,
                           *extra], capture_output=True, text=True, timeout=300)
    if proc.returncode not in (0, 2):
        print(proc.stdout[-1500:], proc.stderr[-1500:], sep="\n")
    return proc


def listing(dump):
    folder = Path(dump) / "checkpoint"
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def files(*steps):
    return sorted(f"step-{s}.safetensors" for s in steps)


def main():
    with tempfile.TemporaryDirectory(prefix="remat_keep_") as tmp:
        dump = os.path.join(tmp, "two")
        out = train(dump, "--training.steps", "5", "--checkpoint.keep_latest_k", "2")
        check("keep 2: the run succeeds", out.returncode == 0, out.stderr[-500:])
        check("keep 2: step-4 and step-5 are left", listing(dump) == files(4, 5), listing(dump))
        removed = [line for line in out.stdout.splitlines() if line.startswith("removed ")]
        check("keep 2: the run names each checkpoint it removed, once",
              removed == [f"removed {dump}/checkpoint/step-{s}.safetensors "
                          "(checkpoint.keep_latest_k)" for s in (1, 2, 3)], removed)
        out = train(dump, "--training.steps", "7", "--checkpoint.keep_latest_k", "2")
        check("keep 2: run again, it resumes from step-5",
              out.returncode == 0 and "step-5.safetensors" in out.stdout and
              "step:  6" in out.stdout, out.stdout[-800:])
        check("keep 2: and leaves step-6 and step-7", listing(dump) == files(6, 7), listing(dump))

        dump = os.path.join(tmp, "default")
        train(dump, "--training.steps", "12")
        check("default: the latest 10 are kept", listing(dump) == files(*range(3, 13)),
              listing(dump))

        dump = os.path.join(tmp, "all")
        train(dump, "--training.steps", "4", "--checkpoint.keep_latest_k", "0")
        check("0: every checkpoint is kept", listing(dump) == files(1, 2, 3, 4), listing(dump))

        # A resume from step 1 into the folder holding steps 1-4: its saves
        # of steps 2 and 3 replace those; step 4, above, stays.
        notes = Path(dump) / "checkpoint" / "notes.txt"
        notes.write_text("mine")
        out = train(dump, "--training.steps", "3", "--checkpoint.keep_latest_k", "1",
                    "--checkpoint.load", f"{dump}/checkpoint/step-1.safetensors")
        check("resumed from an earlier step: later checkpoints stay, older ones go",
              out.returncode == 0 and listing(dump) == sorted(["notes.txt", *files(3, 4)]),
              listing(dump))
        check("the user's file stays", notes.read_text() == "mine")

        dump = os.path.join(tmp, "bad")
        out = train(dump, "--training.steps", "2", "--checkpoint.keep_latest_k", "-1")
        check("a negative keep_latest_k is exit 2 naming the key, nothing written",
              out.returncode == 2 and "checkpoint.keep_latest_k" in out.stderr and
              "integer >= 0" in out.stderr and not os.path.exists(dump), out.stderr[-500:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
