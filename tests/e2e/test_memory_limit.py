"""What memory.limit bounds (README "What memory.limit bounds").

memory.limit bounds the allocator's books, the peak of live tensor bytes that
`remat plan` predicts, not the process's resident set:
- a limit equal to the predicted peak is accepted, and the run's allocator
  peak (metrics peak_bytes and the exit line) is exactly that peak;
- one byte less is refused with exit 2 before anything is allocated;
- the process's peak RSS (VmHWM, printed at exit) is above the limit, by the
  allocator's cache of freed buffers (reserved - peak) plus non-tensor memory
  (RSS - reserved: code, libraries, the token dataset, thread buffers), which
  stays under 64 MiB here (README gives the measured gaps, bench/rss_gap.py).

Usage: test_memory_limit.py <path-to-remat>
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
NON_TENSOR_BOUND = 64 * MIB
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def main():
    for model, mode in (("llama3", "none"), ("llama4", "selective")):
        config = str(REPO / "configs" / f"{model}_debug.toml")
        shape = ["--training.local_batch_size", "2", "--training.seq_len", "64",
                 "--activation_checkpoint.mode", mode]
        with tempfile.TemporaryDirectory(prefix="remat-memlimit-") as tmp:
            tmp = Path(tmp)
            plan = subprocess.run([REMAT, "plan", "--config", config, "--json", *shape],
                                  capture_output=True, text=True, timeout=300)
            peak = json.loads(plan.stdout)["configured"]["peak_bytes"]

            def train(limit, folder):
                return subprocess.run(
                    [REMAT, "train", "--config", config, *shape, "--training.steps", "2",
                     "--memory.limit", f"{limit}B", "--metrics.peak_flops", "1e11",
                     "--metrics.log_freq", "1", "--metrics.jsonl_path", str(tmp / f"{folder}.jsonl"),
                     "--job.dump_folder", str(tmp / folder)],
                    cwd=tmp, capture_output=True, text=True, timeout=300)

            fits = train(peak, "fits")
            m = re.search(r"memory: allocator peak \S+ \(([\d,]+) bytes; what memory.limit bounds\)"
                          r", reserved \S+ \(([\d,]+) bytes, with its cache of freed buffers\), "
                          r"process peak RSS \S+ \(([\d,]+) bytes, VmHWM\)", fits.stdout)
            measured, reserved, rss = ([int(m.group(k).replace(",", "")) for k in (1, 2, 3)]
                                       if m else (0, 0, 0))
            logged = [json.loads(line)["peak_bytes"]
                      for line in (tmp / "fits.jsonl").read_text().splitlines()] \
                if fits.returncode == 0 else []
            name = f"{model} ({mode}), predicted peak {peak} bytes"
            check(fits.returncode == 0 and m is not None,
                  f"{name}: memory.limit = the predicted peak is accepted and the exit line "
                  "gives the allocator peak, reserved bytes and VmHWM")
            check(measured == peak and logged and max(logged) == peak,
                  f"{name}: the run's allocator peak is the predicted one, within the limit "
                  f"(exit line {measured}, metrics {logged})")
            check(rss > peak and reserved >= peak,
                  f"{name}: the process's peak RSS {rss / MIB:.1f} MiB is above memory.limit "
                  f"{peak / MIB:.1f} MiB: the limit bounds the allocator, not RSS")
            check(0 <= rss - reserved <= NON_TENSOR_BOUND,
                  f"{name}: RSS - allocator reserved = {(rss - reserved) / MIB:.1f} MiB of "
                  f"non-tensor memory (at most {NON_TENSOR_BOUND // MIB}); cache "
                  f"{(reserved - peak) / MIB:.1f} MiB")
            below = train(peak - 1, "below")
            check(below.returncode == 2 and "memory.limit" in below.stderr and
                  not (tmp / "below.jsonl").exists(),
                  f"{name}: one byte less is exit 2 before anything is written "
                  f"({below.stderr.strip()[:160]})")
    print(f"{len(failures)} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
