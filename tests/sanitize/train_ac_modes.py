"""Short training runs of both debug models in every AC mode, under the
ASan + UBSan build (`make asan`, part of `make test`).

For configs/llama3_debug.toml and configs/llama4_debug.toml, at batch 2 x
seq 32 (the models' full width, depth and vocabulary): 2 training steps in
each AC mode (none, full, selective 2, selective op, memory_budget 0.5, auto
with a memory.limit between the peaks of full and none, taken from
`remat plan --json`), as 2 accumulated microbatches of 1 and with the
chunked loss head (fp32 and bf16), a memory budget in bf16, then eval of the last checkpoint and a one-step resume
from it. Every run must exit 0 with finite losses and no sanitizer report;
the binary must be the sanitized one (linked with libasan and libubsan), so
this script cannot pass on a plain build.

Not named test_*.py: CMake's glob would run it against the Release binary.

Usage: train_ac_modes.py <build-asan/remat>
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
SHAPE = ["--training.local_batch_size", "2", "--training.seq_len", "32"]
# Skip the start-up FMA measurement (40 runs of 1 ms, slower under ASan).
COMMON = SHAPE + ["--metrics.peak_flops", "1e11", "--metrics.log_freq", "1",
                  "--training.threads", "2"]
SANITIZER_REPORT = re.compile(r"ERROR: AddressSanitizer|ERROR: LeakSanitizer|runtime error:|"
                              r"UndefinedBehaviorSanitizer")
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(args, cwd):
    start = time.time()
    proc = subprocess.run([REMAT, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    report = SANITIZER_REPORT.search(proc.stderr)
    if report or proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-6000:], sep="\n")
    return proc, report, time.time() - start


def losses(stdout):
    return [float(v) for v in re.findall(r"step:\s*\d+\s+loss:\s+(\S+)", stdout)]


def sanitized():
    libs = subprocess.run(["ldd", REMAT], capture_output=True, text=True).stdout
    return "libasan" in libs and "libubsan" in libs


def main():
    check(sanitized(), f"{REMAT} is linked with libasan and libubsan")
    for model in ("llama3", "llama4"):
        config = str(REPO / "configs" / f"{model}_debug.toml")
        with tempfile.TemporaryDirectory(prefix="remat-asan-") as tmp:
            proc, report, secs = run(["plan", "--config", config, "--json", *SHAPE], tmp)
            check(proc.returncode == 0 and not report, f"{model}: plan --json ({secs:.1f} s)")
            peaks = {m["name"]: m["peak_bytes"] for m in json.loads(proc.stdout)["modes"]} \
                if proc.returncode == 0 else {"none": 2 << 30, "full": 1 << 30}
            limit = (peaks["none"] + peaks["full"]) // 2
            modes = {
                "none": ["--activation_checkpoint.mode", "none"],
                "full": ["--activation_checkpoint.mode", "full"],
                "selective 2": ["--activation_checkpoint.mode", "selective",
                                "--activation_checkpoint.selective_ac_option", "2"],
                "selective op": ["--activation_checkpoint.mode", "selective",
                                 "--activation_checkpoint.selective_ac_option", "op"],
                "memory_budget 0.5": ["--activation_checkpoint.mode", "memory_budget",
                                      "--activation_checkpoint.memory_budget", "0.5"],
                f"auto, memory.limit {limit}B": ["--activation_checkpoint.mode", "auto",
                                                 "--memory.limit", f"{limit}B"],
            }
            first_losses = None
            for name, flags in modes.items():
                out = Path(tmp) / name.replace(" ", "_").replace(",", "")
                proc, report, secs = run(["train", "--config", config, *COMMON, *flags,
                                          "--training.steps", "2", "--job.dump_folder", str(out),
                                          "--checkpoint.enable", "true"], tmp)
                got = losses(proc.stdout)
                ok = proc.returncode == 0 and not report and len(got) == 2 and \
                    all(math.isfinite(v) for v in got)
                check(ok, f"{model}, {name}: 2 steps, losses {got}, exit {proc.returncode}"
                          f"{', ' + report.group(0) if report else ''} ({secs:.1f} s)")
                # AC never changes the numbers (the Release tests hold this bit for bit).
                first_losses = first_losses or got
                check(got == first_losses, f"{model}, {name}: same losses as mode none")
            # Gradient accumulation: the same batch as 2 microbatches of 1 (the
            # later one adds into the gradients; losses equal up to rounding).
            proc, report, secs = run(["train", "--config", config, *COMMON,
                                      "--training.local_batch_size", "1",
                                      "--training.global_batch_size", "2", "--training.steps",
                                      "2", "--job.dump_folder", str(Path(tmp) / "accum")], tmp)
            got = losses(proc.stdout)
            check(proc.returncode == 0 and not report and len(got) == 2 and
                  # The log line prints 4 decimals: equal up to its last digit.
                  all(abs(a - b) <= 1.5e-4 for a, b in zip(got, first_losses or [])),
                  f"{model}, 2 microbatches of 1: losses {got}, exit {proc.returncode}"
                  f"{', ' + report.group(0) if report else ''} ({secs:.1f} s)")
            # The chunked loss head (model.loss_chunk_rows): 64 rows as 24 + 24 + 16.
            proc, report, secs = run(["train", "--config", config, *COMMON,
                                      "--model.loss_chunk_rows", "24", "--training.steps", "2",
                                      "--job.dump_folder", str(Path(tmp) / "chunked")], tmp)
            got = losses(proc.stdout)
            check(proc.returncode == 0 and not report and len(got) == 2 and
                  all(abs(a - b) <= 1.5e-4 for a, b in zip(got, first_losses or [])),
                  f"{model}, chunked loss head: losses {got}, exit {proc.returncode}"
                  f"{', ' + report.group(0) if report else ''} ({secs:.1f} s)")
            # bf16 mixed precision: the chunked head (its bf16 copy of the logit
            # gradient), and a memory budget (the solver books the executor's
            # bf16 copies and staging).
            bf16_runs = {
                "chunked loss head in bf16": ["--model.loss_chunk_rows", "24"],
                "memory_budget 0.25 in bf16": ["--activation_checkpoint.mode", "memory_budget",
                                               "--activation_checkpoint.memory_budget", "0.25"],
            }
            for name, flags in bf16_runs.items():
                proc, report, secs = run(["train", "--config", config, *COMMON, *flags,
                                          "--training.steps", "2",
                                          "--training.mixed_precision_param", "bfloat16",
                                          "--job.dump_folder",
                                          str(Path(tmp) / name.replace(" ", "_"))], tmp)
                got = losses(proc.stdout)
                check(proc.returncode == 0 and not report and len(got) == 2 and
                      all(math.isfinite(v) for v in got),
                      f"{model}, {name}: losses {got}, exit {proc.returncode}"
                      f"{', ' + report.group(0) if report else ''} ({secs:.1f} s)")
            checkpoint = Path(tmp) / "none" / "checkpoint" / "step-2.safetensors"
            text = Path(tmp) / "val.txt"
            text.write_text("It is a truth universally acknowledged. " * 10)
            proc, report, secs = run(["eval", "--config", config, *SHAPE, "--checkpoint.load",
                                      str(checkpoint), "--validation.dataset", str(text)], tmp)
            check(proc.returncode == 0 and not report and "validation loss:" in proc.stdout,
                  f"{model}: eval of the step-2 checkpoint ({secs:.1f} s)")
            proc, report, secs = run(["train", "--config", config, *COMMON,
                                      "--training.steps", "3", "--checkpoint.load",
                                      str(checkpoint), "--job.dump_folder", str(Path(tmp) / "r")],
                                     tmp)
            check(proc.returncode == 0 and not report and len(losses(proc.stdout)) == 1,
                  f"{model}: resume from step 2 for one step ({secs:.1f} s)")
    print(f"{len(failures)} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
