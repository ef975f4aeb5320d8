"""checkpoint.load_step and checkpoint.enable_first_step_checkpoint
(torchtitan's; README "Resuming a run").

- enable_first_step_checkpoint: a 6-step run saving every 2 steps also
  saves after step 1 (steps 1, 2, 4, 6); a 1-step run saves step 1 once.
- load_step 2, in a folder holding steps 1, 2, 4 and 6: the run says it
  resumes from step-2 and trains steps 3 to 6 with the bits of the
  uninterrupted run (its metrics, loss and grad_norm as full doubles).
- load_step 3, which the folder lacks: exit 2 naming the key and the steps
  that are there, before training.
- load_step below -1, with checkpoint.load, or without checkpoint.enable:
  exit 2 naming the key.

Usage: test_load_step.py <path-to-remat>
"""
import json
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
         "--metrics.peak_flops", "1e11", "--checkpoint.interval", "2"]
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)


def train(dump, *extra, enable="true", jsonl="metrics.jsonl"):
    return subprocess.run([REMAT, "train", "--config", CONFIG, *SMALL, "--job.dump_folder", dump,
                           "--checkpoint.enable", enable, "--metrics.jsonl_path",
                           f"{dump}/{jsonl}", *extra],
                          capture_output=True, text=True, timeout=300)


def saved(dump):
    return sorted(p.name for p in (Path(dump) / "checkpoint").iterdir())


def metrics(dump, jsonl="metrics.jsonl"):
    with open(f"{dump}/{jsonl}") as f:
        return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, f) if "loss" in r}


def main():
    with tempfile.TemporaryDirectory(prefix="remat_load_step_") as tmp:
        dump = os.path.join(tmp, "run")
        out = train(dump, "--training.steps", "6", "--checkpoint.enable_first_step_checkpoint",
                    "true")
        check("first step checkpoint: steps 1, 2, 4 and 6 are saved",
              out.returncode == 0 and saved(dump) == [f"step-{s}.safetensors" for s in (1, 2, 4, 6)],
              f"exit {out.returncode}: {saved(dump) if out.returncode == 0 else out.stderr}")
        straight = metrics(dump)

        one = os.path.join(tmp, "one")
        out = train(one, "--training.steps", "1", "--checkpoint.enable_first_step_checkpoint",
                    "true")
        check("a 1-step run with the first step checkpoint saves step 1 once",
              out.returncode == 0 and saved(one) == ["step-1.safetensors"] and
              out.stdout.count("checkpoint written") <= 1, out.stdout[-600:])

        out = train(dump, "--training.steps", "6", "--checkpoint.load_step", "2",
                    jsonl="resumed.jsonl")
        check("load_step 2: the run says it resumes from step-2",
              out.returncode == 0 and
              f"resuming from {dump}/checkpoint/step-2.safetensors (checkpoint.load_step)"
              in out.stdout, out.stdout[-800:] + out.stderr[-400:])
        resumed = metrics(dump, "resumed.jsonl")
        check("load_step 2: steps 3 to 6 have the bits of the uninterrupted run",
              sorted(resumed) == [3, 4, 5, 6] and
              all(resumed[s] == straight[s] for s in (3, 4, 5, 6)), f"{resumed} vs {straight}")

        before = saved(dump)
        out = train(dump, "--training.steps", "6", "--checkpoint.load_step", "3")
        check("load_step 3, not in the folder: exit 2 naming the key and the steps there",
              out.returncode == 2 and "checkpoint.load_step = 3" in out.stderr and
              "1, 2, 4, 6" in out.stderr and "step:" not in out.stdout and
              saved(dump) == before, out.stderr[-500:])

        for extra, enable, expected in (
                (["--checkpoint.load_step", "-2"], "true", "or -1 for the latest"),
                (["--checkpoint.load_step", "2", "--checkpoint.load",
                  f"{dump}/checkpoint/step-2.safetensors"], "true", "one or the other"),
                (["--checkpoint.load_step", "2"], "false", "checkpoint.enable")):
            out = train(dump, "--training.steps", "6", *extra, enable=enable)
            check(f"{' '.join(extra[:2])} (enable {enable}): exit 2 naming the key",
                  out.returncode == 2 and "checkpoint.load_step" in out.stderr and
                  expected in out.stderr, out.stderr[-500:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
