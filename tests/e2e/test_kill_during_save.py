"""Fault test: a checkpoint save killed at a random moment never costs more
than the save in flight, and the last checkpoint on disk always loads
(README "Failure behaviour").

A run of the llama3 debug model at batch 1 x seq 32 saves a 74 MB checkpoint
(weights and AdamW moments) after every step, so it spends most of its time
inside saves. Each trial starts such a run, waits for its first checkpoint,
then after a random delay sends:

- SIGKILL (6 trials: 3 at a random moment up to 3 s after the first
  checkpoint, 3 at a random moment within 20 ms of the start of the save of
  step 2 or 3, while it writes the .tmp (74 MB) or fsyncs it): afterwards the newest step-N.safetensors must be the
  step last logged (K) or, when the save of K was cut short, K - 1; a killed
  save may leave step-K.safetensors.tmp and nothing else; every complete
  checkpoint is a whole safetensors file; the newest one passes `remat eval`
  (which checks every tensor's CRC-32C) and a one-step resume from it works
  and removes the stale temporary.
- SIGTERM (2 trials): the run stops at the step boundary after the save in
  flight, saves the last step, exits 143, leaves no temporary, and that
  checkpoint loads. (tests/e2e/test_failure_behaviour.py covers SIGTERM and a
  SIGINT storm between saves; these land inside periodic saves.)

The targeted kills must actually cut saves short: at least 2 of the 3 have
to leave a .tmp behind, or the test fails as not having tested a torn save. The random seed is printed; REMAT_FAULT_SEED=N replays it.

Usage: test_kill_during_save.py <path-to-remat>
"""
import json
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "llama3_debug.toml")
SHAPE = ["--training.local_batch_size", "1", "--training.seq_len", "32"]
KILL_TRIALS = 6
TERM_TRIALS = 2
TIMEOUT_S = 120
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def start_run(tmp):
    argv = [REMAT, "train", "--config", CONFIG, *SHAPE, "--training.steps", "1000",
            "--checkpoint.enable", "true", "--checkpoint.interval", "1",
            "--job.dump_folder", str(tmp / "out"), "--metrics.jsonl_path", str(tmp / "m.jsonl"),
            "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11"]
    return subprocess.Popen(argv, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def checkpoints(folder):
    """{step: path} of the complete checkpoints (final names only)."""
    found = {}
    for p in folder.glob("step-*.safetensors"):
        m = re.fullmatch(r"step-(\d+)\.safetensors", p.name)
        if m:
            found[int(m.group(1))] = p
    return found


def whole_safetensors(path):
    """The header parses and the tensors tile the rest of the file exactly."""
    data = path.read_bytes()
    if len(data) < 8:
        return False
    n = struct.unpack("<Q", data[:8])[0]
    try:
        header = json.loads(data[8:8 + n])
    except ValueError:
        return False
    header.pop("__metadata__", None)
    end = max((e["data_offsets"][1] for e in header.values()), default=0)
    return len(data) == 8 + n + end and len(header) > 0


def last_logged_step(tmp):
    path = tmp / "m.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return json.loads(lines[-1])["step"] if lines else 0


def wait_for_first_checkpoint(proc, folder):
    start = time.time()
    while time.time() - start < TIMEOUT_S and proc.poll() is None:
        if checkpoints(folder):
            return True
        time.sleep(0.01)
    return False


def loads(tmp, checkpoint, step):
    """eval checks every tensor's checksum; a resume also loads the moments."""
    text = tmp / "val.txt"
    text.write_text("Nothing is lost, nothing is created, everything is transformed. " * 4)
    ev = subprocess.run([REMAT, "eval", "--config", CONFIG, *SHAPE, "--checkpoint.load",
                         str(checkpoint), "--validation.dataset", str(text)],
                        cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S)
    resume = subprocess.run([REMAT, "train", "--config", CONFIG, *SHAPE,
                             "--training.steps", str(step + 1), "--checkpoint.load", str(checkpoint),
                             "--checkpoint.enable", "true", "--checkpoint.interval", "1000",
                             "--job.dump_folder", str(tmp / "out"),
                             "--metrics.peak_flops", "1e11"],
                            cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S)
    eval_ok = ev.returncode == 0 and "validation loss:" in ev.stdout
    resume_ok = resume.returncode == 0 and f"(step {step})" in resume.stdout
    if not (eval_ok and resume_ok):
        print(ev.stderr[-1000:], resume.stderr[-1000:], sep="\n")
    return eval_ok, resume_ok


def wait_for_temporary(proc, folder, step):
    """Until step-<step>.safetensors.tmp exists: that save is writing."""
    start = time.time()
    tmp = folder / f"step-{step}.safetensors.tmp"
    while time.time() - start < TIMEOUT_S and proc.poll() is None:
        if tmp.exists():
            return True
        time.sleep(0.001)
    return False


def kill_trial(number, rng, targeted):
    with tempfile.TemporaryDirectory(prefix="remat-kill-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "out" / "checkpoint"
        proc = start_run(tmp)
        started = wait_for_first_checkpoint(proc, folder)
        if targeted:  # inside the write and fsync of the save of step 2 or 3
            step = rng.choice([2, 3])
            delay = rng.uniform(0.0, 0.02)
            started = started and wait_for_temporary(proc, folder, step)
            when = f"{delay:.3f} s into the save of step {step}"
        else:
            delay = rng.uniform(0.0, 3.0)
            when = f"{delay:.2f} s after the first checkpoint"
        time.sleep(delay)
        proc.kill()
        proc.communicate(timeout=TIMEOUT_S)
        name = f"SIGKILL {number}, {when}"
        if not started:
            check(False, f"{name}: the run wrote its first checkpoint")
            return False
        logged = last_logged_step(tmp)
        complete = checkpoints(folder)
        newest = max(complete)
        temporaries = sorted(p.name for p in folder.glob("*.tmp"))
        mid_save = bool(temporaries)
        check(newest in (logged, logged - 1) and
              (not mid_save or (temporaries == [f"step-{logged}.safetensors.tmp"] and
                                newest == logged - 1)),
              f"{name}: last logged step {logged}, newest checkpoint step-{newest}, "
              f"temporaries {temporaries}: at most the save in flight is lost")
        check(all(whole_safetensors(p) for p in complete.values()),
              f"{name}: all {len(complete)} complete checkpoints are whole files")
        eval_ok, resume_ok = loads(tmp, complete[newest], newest)
        check(eval_ok, f"{name}: step-{newest} passes eval (checksums)")
        check(resume_ok and not list(folder.glob("*.tmp")),
              f"{name}: resuming from step-{newest} works and removes the stale temporary")
        return mid_save


def term_trial(number, rng):
    with tempfile.TemporaryDirectory(prefix="remat-term-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "out" / "checkpoint"
        proc = start_run(tmp)
        started = wait_for_first_checkpoint(proc, folder)
        delay = rng.uniform(0.0, 3.0)
        time.sleep(delay)
        in_save = bool(list(folder.glob("*.tmp")))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        name = f"SIGTERM {number} after {delay:.2f} s{' (a save was in flight)' if in_save else ''}"
        logged = last_logged_step(tmp)
        complete = checkpoints(folder)
        check(started and proc.returncode == 143 and "interrupted by SIGTERM" in out,
              f"{name}: exit status {proc.returncode}, expected 143")
        check(bool(complete) and max(complete) == logged and not list(folder.glob("*.tmp")),
              f"{name}: the last logged step {logged} is saved, no temporary left")
        if complete:
            eval_ok, resume_ok = loads(tmp, complete[max(complete)], max(complete))
            check(eval_ok and resume_ok, f"{name}: step-{max(complete)} loads (eval and resume)")


def main():
    seed = int(os.environ.get("REMAT_FAULT_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (REMAT_FAULT_SEED={seed} replays these moments)")
    rng = random.Random(seed)
    for i in range(KILL_TRIALS // 2):
        kill_trial(i + 1, rng, targeted=False)
    mid_write = sum(kill_trial(i + 1, rng, targeted=True)
                    for i in range(KILL_TRIALS // 2, KILL_TRIALS))
    check(mid_write >= 2,
          f"{mid_write} of {KILL_TRIALS // 2} targeted kills cut a save short, leaving its .tmp "
          "(at least 2 must, or the test did not test a torn save)")
    for i in range(TERM_TRIALS):
        term_trial(i + 1, rng)
    print(f"{len(failures)} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
