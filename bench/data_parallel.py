"""Data parallelism side by side, in one run on one machine: 1 process with 1
thread against 2 ranks of `mpirun -np 2` with 1 thread each, for replicate
(parallelism.data_parallel_replicate_degree) and shard (ZeRO-3/FSDP,
data_parallel_shard_degree: parameters, gradients and AdamW state 1/2 per
rank, each block gathered for its forward and again for its backward).

Every rank trains the same local batch, so the 2-rank runs process twice the
tokens per step (weak scaling). For each set-up and model, 2 warm-up + N timed
steps; reports the global tokens/s (median over the timed steps of the
per-rank tps x ranks), the scaling against the single process (target >= 1.8x),
the share of the training loop each rank spent blocked in collectives (the
`communication:` line remat prints: the communication not hidden behind
compute), each rank's allocator peak against the single process's, and the
bytes of parameters, gradients and AdamW state a rank holds at its peak
against the single process's (sharding's target: about 1/2). With --write,
replaces the "data_parallel" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/data_parallel.py [--remat build/remat] [--steps 5] [--write]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import machine, markers, replace_section

BEGIN, END = markers("data_parallel")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2"]
MODELS = {
    "llama3 debug (batch 8 x seq 256 per rank)": "configs/llama3_debug.toml",
    "llama4 debug (batch 8 x seq 256 per rank)": "configs/llama4_debug.toml",
}
STATE = ("parameters", "gradients", "optimizer_state")
SETUPS = [  # label, ranks, extra arguments
    ("1 process x 1 thread", 1, []),
    ("2 ranks x 1 thread, replicate", 2, ["--parallelism.data_parallel_replicate_degree", "2"]),
    ("2 ranks x 1 thread, shard", 2, ["--parallelism.data_parallel_shard_degree", "2"]),
]


def run(remat, config, ranks, extra, steps, tmp):
    """The run's figures, or the first line of its error when it refuses."""
    metrics = os.path.join(tmp, "m.jsonl")
    cmd = [remat, "train", "--config", config, *extra, "--training.steps", str(steps + 2),
           "--training.threads", "1", "--metrics.log_freq", "1", "--metrics.jsonl_path",
           metrics, "--job.dump_folder", tmp]
    proc = subprocess.run((MPIRUN if ranks > 1 else []) + cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        error = next((l for l in proc.stderr.splitlines() if l.startswith("error:")),
                     f"exit {proc.returncode}")
        return {"error": error}
    rows = [json.loads(l) for l in open(metrics) if '"loss"' in l][2:]
    waits = [float(w) for w in re.findall(r"rank \d+ [\d.]+ s \(([\d.]+)%\)",
                                          re.search(r"communication: .*", proc.stdout).group(0))
             ] if ranks > 1 else [0.0]
    parts = re.search(r"memory per rank at the step peak: rank 0 (.*?)(;|$)", proc.stdout, re.M)
    state = (sum(int(n.replace(",", "")) for name, n in
                 re.findall(r"(\w+) ([\d,]+)", parts.group(1)) if name in STATE)
             if parts else single_process_state(remat, config, extra))
    per_rank = re.search(r"memory per rank: allocator peak bytes (.*)", proc.stdout)
    peaks = ([int(p.replace(",", "")) for p in re.findall(r"rank \d+ ([\d,]+)", per_rank.group(1))]
             if per_rank else [max(r["peak_bytes"] for r in rows)])
    return {"tps": statistics.median(r["tps"] for r in rows) * ranks, "waits": waits,
            "peaks": peaks, "state": state}


def single_process_state(remat, config, extra):
    """Parameter, gradient and optimizer bytes of one process (`remat plan`, exact)."""
    plan = json.loads(subprocess.run([remat, "plan", "--config", config, *extra, "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    return sum(plan["configured"]["at_peak"][p] for p in STATE)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    out = [BEGIN, "## Data parallelism over MPI (remat)", "",
           f"Command: `/usr/bin/python3 bench/data_parallel.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute load "
           f"average {os.getloadavg()[0]:.1f} at the end. Median of {args.steps} timed steps "
           "after 2 warm-up steps; every rank trains the batch the single process does, so "
           "tokens/s is global (ranks x per-rank tps). Comm wait: the share of the training "
           "loop a rank spent blocked in collectives.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for model, config in MODELS.items():
            out += [f"### {model}", "",
                    "| set-up | tokens/s | scaling | comm wait per rank | "
                    "allocator peak MiB per rank | peak vs 1 process | "
                    "params + grads + AdamW vs 1 process |",
                    "|---|---:|---:|---:|---:|---:|---:|"]
            single = None
            for label, ranks, extra in SETUPS:
                r = run(args.remat, config, ranks, extra, args.steps, tmp)
                if "error" in r:
                    out.append(f"| {label} | not run: {r['error']} | | | | | |")
                    print(out[-1], flush=True)
                    continue
                single = single or r
                out.append(
                    f"| {label} | {r['tps']:,.0f} | {r['tps'] / single['tps']:.2f}x | "
                    f"{', '.join(f'{w:.1f}%' for w in r['waits'])} | "
                    f"{', '.join(f'{p / 2**20:,.1f}' for p in r['peaks'])} | "
                    f"{max(r['peaks']) / max(single['peaks']):.2f}x | "
                    f"{r['state'] / single['state']:.2f}x |")
                print(out[-1], flush=True)
            out.append("")
    out.append(END)
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("data_parallel", text)


main()
