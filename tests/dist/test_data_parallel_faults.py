#!/usr/bin/python3
"""Faults of a 2-rank data-parallel run (mpirun -np 2) end every rank, say
which rank and why, and never hang.

  /usr/bin/python3 tests/dist/test_data_parallel_faults.py path/to/remat

 1. rank 1 killed with SIGKILL mid-run: mpirun exits non-zero within 15 s,
    and the output names rank 1 (mpirun's report);
 2. rank 1 stopped with SIGSTOP (alive but silent) and comm.train_timeout_seconds
    = 3: rank 0 gives up waiting in its collective, says so naming itself and
    the timeout, and the job exits non-zero within 20 s;
 3. SIGTERM to rank 1 only: rank 0 stops after the same step (the ranks
    agree on stopping at every step boundary), saves it and reports an
    interrupted run (exit 143);
 4. bad input seen by every rank (training.steps = -1): every rank exits 2,
    the message printed once;
 5. bad input seen by rank 1 only (an MPMD launch running it in another
    folder, where the config's relative dataset path names no file): every
    rank exits 2, rank 1's message printed once, no metrics file written;
 5b. ranks given different configs (an MPMD launch giving rank 1 another
    training.steps): every rank exits 2 before anything is written, the
    first setting that differs named once (they crashed or trained on);
 6. the degree against the ranks: 2 ranks with replicate degree 1, and one
    process with replicate degree 2, exit 2 saying what to set; so does
    `remat plan` under 2 ranks (only train runs under mpirun).
Exit 0 only if everything holds.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(REPO, "configs", "llama3_debug.toml")
sys.dont_write_bytecode = True
from mpi_kit import MPIRUN, check, failures, main_guarded, rank_pid  # noqa: E402


def train_args(remat, tmp, *extra):
    return [remat, "train", "--config", CONFIG, "--training.seq_len", "64",
            "--training.local_batch_size", "2", "--training.threads", "1",
            "--metrics.peak_flops", "1e11", "--metrics.log_freq", "1",
            "--job.dump_folder", tmp, *extra]


def start_long_run(remat, tmp, *extra):
    """A 2-rank run of many steps, returned once it has logged step 2."""
    os.makedirs(tmp, exist_ok=True)
    log = open(os.path.join(tmp, "out.txt"), "w+")
    proc = subprocess.Popen(MPIRUN + ["-np", "2"] + train_args(
        remat, tmp, "--training.steps", "100000", "--parallelism.data_parallel_replicate_degree",
        "2", *extra), stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        log.seek(0)
        if "step:  2" in log.read():
            return proc, log
        time.sleep(0.2)
    proc.kill()
    log.seek(0)
    raise RuntimeError("the long run did not reach step 2:\n" + log.read()[-3000:])


def finish(proc, log, seconds):
    """Waits at most `seconds` for mpirun; returns (status, elapsed, output)."""
    start = time.time()
    try:
        status = proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        status = None
    elapsed = time.time() - start
    log.seek(0)
    return status, elapsed, log.read()


def killed_rank(remat, tmp):
    proc, log = start_long_run(remat, tmp)
    os.kill(rank_pid(proc.pid, 1, time.time() + 10), signal.SIGKILL)
    status, elapsed, out = finish(proc, log, 15)
    check("SIGKILL of rank 1: the job ends non-zero", status not in (None, 0),
          f"status {status} after {elapsed:.1f} s")
    # mpirun's own report: "mpirun noticed that process rank 1 with PID ... exited on signal 9".
    check("SIGKILL of rank 1: the output names rank 1",
          re.search(r"process rank 1 with PID \d+ .*exited on signal 9", out) is not None,
          out[-600:])


def stopped_rank(remat, tmp):
    proc, log = start_long_run(remat, tmp, "--comm.train_timeout_seconds", "3")
    pid = rank_pid(proc.pid, 1, time.time() + 10)
    os.kill(pid, signal.SIGSTOP)
    try:
        status, elapsed, out = finish(proc, log, 20)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    check("SIGSTOP of rank 1: the job ends non-zero", status not in (None, 0),
          f"status {status} after {elapsed:.1f} s")
    check("SIGSTOP of rank 1: rank 0 names itself and the timeout",
          "error: rank 0: the " in out and "did not complete within 3 s" in out, out[-600:])


def one_rank_signalled(remat, tmp):
    # SIGTERM reaches rank 1 alone (a scheduler's signal, or one Ctrl-C'd
    # terminal): the ranks agree at the next step boundary and both stop there.
    proc, log = start_long_run(remat, tmp, "--checkpoint.enable", "true")
    os.kill(rank_pid(proc.pid, 1, time.time() + 10), signal.SIGTERM)
    status, elapsed, out = finish(proc, log, 30)
    stopped = re.search(r"stopping after step (\d+)", out)
    saved = stopped and os.path.isfile(
        os.path.join(tmp, "checkpoint", f"step-{stopped.group(1)}.safetensors"))
    check("SIGTERM to rank 1 only: the job ends non-zero", status not in (None, 0),
          f"status {status} after {elapsed:.1f} s")
    check("SIGTERM to rank 1 only: rank 0 stops at the same step and saves it",
          bool(saved) and "exit status 143: interrupted run" in out, out[-600:])


def bad_input(remat, tmp, label, cmd, message, statuses=(2,)):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    check(f"{label}: exit status 2", proc.returncode in statuses,
          f"{proc.returncode}: {proc.stderr[-600:]}")
    count = proc.stderr.count(message)
    check(f"{label}: the message printed once", count == 1,
          f"{count} times in: {proc.stderr[-600:]}")
    return proc


def main():
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="remat_dp_faults_") as tmp:
        killed_rank(remat, os.path.join(tmp, "killed"))
        stopped_rank(remat, os.path.join(tmp, "stopped"))
        one_rank_signalled(remat, os.path.join(tmp, "signalled"))
        two = MPIRUN + ["-np", "2"]
        bad_input(remat, tmp, "bad input on every rank",
                  two + train_args(remat, tmp, "--training.steps", "-1",
                                   "--parallelism.data_parallel_replicate_degree", "2"),
                  "training.steps")
        metrics = os.path.join(tmp, "one_rank", "metrics.jsonl")
        good = train_args(remat, os.path.join(tmp, "one_rank"), "--training.steps", "2",
                          "--parallelism.data_parallel_replicate_degree", "2",
                          "--metrics.jsonl_path", metrics)
        # The same config on both ranks; the relative dataset path finds its
        # file in rank 0's folder only.
        for folder in ("rank0", "rank1"):
            os.makedirs(os.path.join(tmp, folder), exist_ok=True)
        with open(os.path.join(tmp, "rank0", "data.txt"), "w") as f:
            f.write("a few words of text to train on, repeated. " * 400)
        same = good + ["--training.dataset_path", "data.txt"]
        bad_input(remat, tmp, "bad input on rank 1 only",
                  MPIRUN + ["-np", "1", "-wdir", os.path.join(tmp, "rank0")] + same +
                  [":", "-np", "1", "-wdir", os.path.join(tmp, "rank1")] + same, "data.txt")
        check("bad input on rank 1 only: no metrics file", not os.path.exists(metrics))
        proc = bad_input(remat, tmp, "ranks given different configs",
                         MPIRUN + ["-np", "1"] + good + [":", "-np", "1"] + good +
                         ["--training.steps", "3"],
                         "training.steps = 2 on rank 0, another value on rank(s) 1")
        check("ranks given different configs: no metrics file, no rank 1 message",
              not os.path.exists(metrics) and "on rank 1, another value" not in proc.stderr,
              proc.stderr[-600:])
        bad_input(remat, tmp, "2 ranks, replicate degree 1",
                  two + train_args(remat, tmp, "--training.steps", "1"),
                  "parallelism.data_parallel_replicate_degree = 1, but the run has 2 ranks")
        bad_input(remat, tmp, "`remat plan` under 2 ranks",
                  two + [remat, "plan", "--config", CONFIG], "runs in one process")
        bad_input(remat, tmp, "1 process, replicate degree 2",
                  train_args(remat, tmp, "--training.steps", "1",
                             "--parallelism.data_parallel_replicate_degree", "2"),
                  "launch with `mpirun -np 2")
    return 1 if failures else 0


if __name__ == "__main__":
    main_guarded(main)
