#!/usr/bin/python3
"""Ctrl-C on mpirun saves without waiting for the step boundary (README
"Data parallelism over MPI"; train/stop_snapshot.h).

  /usr/bin/python3 tests/dist/test_ctrl_c_snapshot.py path/to/remat

Open MPI answers Ctrl-C with SIGTERM to the ranks and SIGKILL 1 s later
(odls_base_sigkill_timeout, left at its default here). A step of this run
takes longer than that, so the ranks never reach the next step boundary to
save there; each rank's snapshot, forked at the SIGTERM, saves instead. For
2 ranks replicated and 2 ranks ZeRO-3 sharded (sharded checkpoints, an
interval that never saves by itself):
 1. after SIGINT to mpirun, within 60 s, a step folder gets its index: a
    complete checkpoint, of the last step logged before the SIGINT or a
    later one;
 2. it holds both ranks' shards of that step and nothing else;
 3. resuming from it, 2 ranks continue with the bits of an uninterrupted
    run (loss and grad_norm of the next 2 steps);
 4. (replicated) Ctrl-C on a resumed run before its first step completes
    does not write the loaded step again (the state then is the loaded
    checkpoint's).
Exit 0 only if everything holds.
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
from mpi_kit import MPIRUN, check, failures, main_guarded, run  # noqa: E402

# Steps of a few seconds on one thread per rank (seq 256 x batch 8 per rank),
# well above the 1 s between Open MPI's SIGTERM and SIGKILL. The learning
# rate does not depend on training.steps (warmup, then constant), so runs of
# other lengths compare step for step.
COMMON = ["--training.seq_len", "256", "--training.local_batch_size", "8",
          "--training.threads", "1", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11",
          "--checkpoint.format", "sharded", "--lr_scheduler.warmup_steps", "2",
          "--lr_scheduler.decay_ratio", "0"]


def command(remat, tmp, name, dp, extra):
    return MPIRUN + ["-np", "2", remat, "train", "--config",
                     os.path.join(REPO, "configs", "llama3_debug.toml"), *COMMON,
                     f"--parallelism.data_parallel_{dp}_degree", "2",
                     "--metrics.jsonl_path", os.path.join(tmp, name + ".jsonl"),
                     "--job.dump_folder", os.path.join(tmp, name), *extra]


def steps(tmp, name):
    """step -> (loss, grad_norm), full doubles, from the run's metrics."""
    with open(os.path.join(tmp, name + ".jsonl")) as f:
        rows = [json.loads(line) for line in f if '"loss"' in line]
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in rows}


def shard_step(path):
    """The step a rank's shard file records (its safetensors metadata)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            return json.loads(f.read(n))["__metadata__"]["step"]
    except (OSError, ValueError, KeyError):
        return None


def complete_steps(root):
    """The steps whose folder under `root` has an index."""
    if not os.path.isdir(root):
        return []
    return sorted(int(d[5:]) for d in os.listdir(root)
                  if d.startswith("step-") and os.path.isfile(os.path.join(root, d, "index.json")))


def interrupt(cmd, log_path, after_step):
    """Runs `cmd`, sends SIGINT to mpirun once step `after_step` is logged
    (0: once training starts); returns the log and the last step logged
    before the SIGINT."""
    with open(log_path, "w+") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        logged, started = [], False
        while time.time() < deadline and proc.poll() is None:
            log.seek(0)
            text = log.read()
            logged = [int(s) for s in re.findall(r"step:\s+(\d+)", text)]
            started = "device: CPU" in text  # the trainer's last line before its first step
            if started and (logged[-1] if logged else 0) >= after_step:
                break
            time.sleep(0.05)
        if proc.poll() is not None or not started or (logged[-1] if logged else 0) < after_step:
            proc.kill()
            log.seek(0)
            raise RuntimeError(f"the run did not reach step {after_step}:\n" + log.read()[-3000:])
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        log.seek(0)
        return log.read(), logged[-1] if logged else 0


def ctrl_c(remat, tmp, dp):
    name = "ctrl_c_" + dp
    out, last = interrupt(command(remat, tmp, name, dp, [
        "--training.steps", "100000", "--checkpoint.enable", "true",
        "--checkpoint.interval", "100000"]), os.path.join(tmp, name + ".txt"), 2)
    root = os.path.join(tmp, name, "checkpoint")
    deadline = time.time() + 60
    while not complete_steps(root) and time.time() < deadline:
        time.sleep(0.1)
    complete = complete_steps(root)
    check(f"{dp}: Ctrl-C on mpirun without odls_base_sigkill_timeout: a complete checkpoint "
          "within 60 s", len(complete) > 0,
          f"steps {complete}" if complete else "none; the run's log:\n" + out[-1500:])
    if not complete:
        return None
    step = complete[-1]
    check(f"{dp}: it is of a step at or after the last one logged before the Ctrl-C",
          step >= last, f"step {step}, logged {last} before the Ctrl-C")
    where = os.path.join(root, f"step-{step}")
    shard_steps = [shard_step(os.path.join(where, f"shard-{r}-of-2.safetensors")) for r in (0, 1)]
    check(f"{dp}: both ranks' shards are of step {step}", shard_steps == [str(step)] * 2,
          str(shard_steps))
    check(f"{dp}: the step folder holds the index and the two shards only",
          sorted(os.listdir(where)) ==
          ["index.json", "shard-0-of-2.safetensors", "shard-1-of-2.safetensors"],
          str(sorted(os.listdir(where))))
    total = str(step + 2)
    run(command(remat, tmp, name + "_resumed", dp, [
        "--training.steps", total, "--checkpoint.load", where]), f"{dp}: resume after Ctrl-C")
    run(command(remat, tmp, name + "_straight", dp, ["--training.steps", total]),
        f"{dp}: uninterrupted run")
    straight, resumed = steps(tmp, name + "_straight"), steps(tmp, name + "_resumed")
    same = resumed == {s: v for s, v in straight.items() if s > step} and len(resumed) == 2
    check(f"{dp}: the resumed run continues bit for bit", same,
          f"from step {step}" if same else f"from step {step}: {resumed} vs {straight}")
    return where, step


def ctrl_c_before_the_first_step(remat, tmp, checkpoint, loaded):
    """SIGTERM reaches the ranks 1 s after the Ctrl-C, within the first step
    (several seconds): the state then is the loaded one, not written again;
    only a step the run completed may be (on a machine fast enough)."""
    name = "ctrl_c_early"
    out, last = interrupt(command(remat, tmp, name, "replicate", [
        "--training.steps", "100000", "--checkpoint.enable", "true",
        "--checkpoint.interval", "100000", "--checkpoint.load", checkpoint]),
        os.path.join(tmp, name + ".txt"), 0)
    time.sleep(3)  # a child would have written by now
    root = os.path.join(tmp, name, "checkpoint")
    written = sorted(os.listdir(root)) if os.path.isdir(root) else []
    check(f"Ctrl-C before the first step completes: the loaded step {loaded} is not written "
          "again", f"step-{loaded}" not in written and
          all(int(d[5:]) > loaded for d in written if d.startswith("step-")),
          f"{root}: {written}")


def main():
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="remat_ctrl_c_") as tmp:
        saved = ctrl_c(remat, tmp, "replicate")
        ctrl_c(remat, tmp, "shard")
        if saved:
            ctrl_c_before_the_first_step(remat, tmp, *saved)
    return 1 if failures else 0


if __name__ == "__main__":
    main_guarded(main)
