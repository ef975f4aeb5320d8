"""Memory against speed at one global batch: gradient accumulation beside AC.

For llama3 and llama4 debug (seq 256), every set-up trains steps of the same
8 sequences: batch 8 in one pass with AC none, selective op and full, and
batch 8 as 2, 4 and 8 accumulated microbatches (training.global_batch_size 8)
with AC none. Set-ups run in interleaved rounds, so slow phases of a shared
machine hit them alike. Prints per set-up the allocator peak (what
memory.limit bounds, from the metrics), the median tokens/s of the timed
steps and its ratio to batch 8 with AC none, so the two ways of trading speed
for memory can be compared at the same step. With --write it replaces the
"gradient_accumulation" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/gradient_accumulation.py [--remat build/remat]
           [--steps 6] [--rounds 2] [--models llama3,llama4] [--write]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import machine, markers, replace_section

AC = "--activation_checkpoint."
GLOBAL = 8
SETUPS = [
    ("batch 8, AC none", ["--training.local_batch_size", "8", AC + "mode", "none"]),
    ("batch 8, selective op AC", ["--training.local_batch_size", "8", AC + "mode", "selective",
                                  AC + "selective_ac_option", "op"]),
    ("batch 8, full AC", ["--training.local_batch_size", "8", AC + "mode", "full"]),
] + [(f"{GLOBAL // local} microbatches of {local}, AC none",
      ["--training.local_batch_size", str(local), "--training.global_batch_size", str(GLOBAL),
       AC + "mode", "none"]) for local in (4, 2, 1)]
WARMUP = 2


def train(remat, model, setup, steps, tmp):
    """The timed steps' tokens/s and the run's allocator peak in bytes."""
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([remat, "train", "--config", f"configs/{model}_debug.toml", *setup,
                    "--training.seq_len", "256", "--training.steps", str(steps + WARMUP),
                    "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics,
                    "--job.dump_folder", tmp, "--training.threads", "2",
                    "--validation.enabled", "false"], check=True, capture_output=True)
    rows = [json.loads(line) for line in open(metrics)]
    return [r["tps"] for r in rows[WARMUP:]], max(r["peak_bytes"] for r in rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--models", default="llama3,llama4")
    parser.add_argument("--write", action="store_true",
                        help="replace BENCHMARKS.md's gradient_accumulation section")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    print(f"{machine()}, 2 threads, 1-minute load average {load_before:.1f} at the start")
    header = ["| model | set-up | allocator peak MiB | peak vs batch 8 none | median tokens/s "
              "| tokens/s vs batch 8 none |", "|---|---|---:|---:|---:|---:|"]
    print("\n".join(header))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            tps = {name: [] for name, _ in SETUPS}
            peak = {}
            for _ in range(args.rounds):
                for name, setup in SETUPS:
                    got, peak[name] = train(args.remat, model, setup, args.steps, tmp)
                    tps[name].extend(got)
            base_name = SETUPS[0][0]
            base_tps, base_peak = statistics.median(tps[base_name]), peak[base_name]
            for name, _ in SETUPS:
                median = statistics.median(tps[name])
                rows.append(f"| {model} debug | {name} | {peak[name] / 2**20:.1f} | "
                            f"{peak[name] / base_peak:.2f}x | {median:,.0f} | "
                            f"{median / base_tps:.2f}x |")
                print(rows[-1], flush=True)
    load_after = os.getloadavg()[0]
    if args.write:
        begin, end = markers("gradient_accumulation")
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        body = "\n".join([
            begin,
            "## Gradient accumulation beside AC: memory and speed at one global batch",
            "",
            f"Command: `/usr/bin/python3 bench/gradient_accumulation.py --write` on {machine()}, "
            f"2 cores, 2 threads, {stamp}, 1-minute load average {load_before:.1f} at the start "
            f"and {load_after:.1f} at the end. Every set-up trains steps of the same "
            f"{GLOBAL} sequences of 256 tokens ({args.rounds} interleaved rounds of "
            f"{args.steps} timed steps after {WARMUP} warm-up): in one pass under three AC "
            "modes, or as accumulated microbatches (`training.global_batch_size "
            f"{GLOBAL}`) with AC none. Allocator peak: what `memory.limit` bounds (the "
            "metrics' peak_bytes, which `remat plan` predicts). Tokens/s: the median of the "
            "timed steps, counting every microbatch's tokens.",
            "", *header, *rows, "", end])
        replace_section("gradient_accumulation", body)


if __name__ == "__main__":
    main()
