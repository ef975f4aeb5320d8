"""Data parallelism side by side, in one run on one machine: 1 process with 1
thread against 2 ranks of `mpirun -np 2` with 1 thread each, for replicate
(parallelism.data_parallel_replicate_degree) and shard (ZeRO-3/FSDP,
data_parallel_shard_degree: parameters, gradients and AdamW state 1/2 per
rank, each block gathered for its forward and again for its backward).

Every rank trains the same local batch, so the 2-rank runs process twice the
tokens per step (weak scaling). A fourth set-up is the machine's own ceiling:
two independent single processes started together (no communication at all:
what two cores give when both work). For each set-up and model, 2 warm-up + N
timed steps, over --rounds interleaved rounds; reports the global tokens/s
(median over the timed steps of the per-rank tps x ranks), the scaling against
the single process of the same round (the median over rounds: this host's
speed drifts over minutes, so each ratio pairs runs a minute apart; target
>= 1.8x),
the share of the training loop each rank spent blocked in collectives (the
`communication:` line remat prints: the communication not hidden behind
compute), each rank's allocator peak against the single process's, and the
bytes of parameters, gradients and AdamW state a rank holds at its peak
against the single process's (sharding's target: about 1/2). With --write,
replaces the "data_parallel" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/data_parallel.py [--remat build/remat] [--steps 5]
       [--rounds 3] [--write]
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
CEILING = "2 independent processes x 1 thread (no communication)"


def command(remat, config, extra, steps, tmp):
    return [remat, "train", "--config", config, *extra, "--training.steps", str(steps + 2),
            "--training.threads", "1", "--metrics.log_freq", "1", "--metrics.jsonl_path",
            os.path.join(tmp, "m.jsonl"), "--job.dump_folder", tmp]


def median_tps(tmp):
    rows = [json.loads(l) for l in open(os.path.join(tmp, "m.jsonl")) if '"loss"' in l][2:]
    return statistics.median(r["tps"] for r in rows)


def independent_pair(remat, config, steps, tmp):
    """Two single processes at once: their summed tokens/s."""
    folders = [os.path.join(tmp, f"alone{i}") for i in range(2)]
    procs = [subprocess.Popen(command(remat, config, [], steps, f), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for f in folders]
    if any(p.wait() != 0 for p in procs):
        return {"error": "a single process failed"}
    return {"tps": sum(median_tps(f) for f in folders)}


def run(remat, config, ranks, extra, steps, tmp):
    """The run's figures, or the first line of its error when it refuses."""
    metrics = os.path.join(tmp, "m.jsonl")
    cmd = command(remat, config, extra, steps, tmp)
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


def model_rows(args, config, tmp):
    """The table rows of one model: every set-up once per round, interleaved."""
    labels = [label for label, _, _ in SETUPS] + [CEILING]
    results = {label: [] for label in labels}
    for _ in range(args.rounds):
        for label, ranks, extra in SETUPS:
            results[label].append(run(args.remat, config, ranks, extra, args.steps, tmp))
        results[CEILING].append(independent_pair(args.remat, config, args.steps, tmp))
        print({k: round(v[-1].get("tps", 0)) for k, v in results.items()}, flush=True)
    single = results[labels[0]]
    rows = []
    for label in labels:
        rs = results[label]
        error = next((r["error"] for r in rs if "error" in r), None)
        if error or any("error" in r for r in single):
            rows.append(f"| {label} | not run: {error or 'the single process failed'} "
                        "| | | | | | |")
            continue
        ratios = sorted(r["tps"] / s["tps"] for r, s in zip(rs, single))
        tps = statistics.median(r["tps"] for r in rs)
        row = (f"| {label} | {tps:,.0f} | {statistics.median(ratios):.2f}x | "
               f"{ratios[0]:.2f}-{ratios[-1]:.2f}x |")
        last, first = rs[-1], single[-1]
        if "peaks" in last:
            row += (f" {', '.join(f'{w:.1f}%' for w in last['waits'])} | "
                    f"{', '.join(f'{p / 2**20:,.1f}' for p in last['peaks'])} | "
                    f"{max(last['peaks']) / max(first['peaks']):.2f}x | "
                    f"{last['state'] / first['state']:.2f}x |")
        else:
            row += " | | | |"
        rows.append(row)
        print(row, flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    out = [BEGIN, "## Data parallelism over MPI (remat)", "",
           f"Command: `/usr/bin/python3 bench/data_parallel.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute load "
           f"average {os.getloadavg()[0]:.1f} at the end. Median of {args.steps} timed steps "
           f"after 2 warm-up steps, {args.rounds} interleaved rounds (scaling: the median over "
           "rounds of each round's ratio to its own single process, and the range); every rank trains the batch the single process does, so "
           "tokens/s is global (ranks x per-rank tps). Comm wait: the share of the training "
           "loop a rank spent blocked in collectives.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for model, config in MODELS.items():
            out += [f"### {model}", "",
                    "| set-up | tokens/s | scaling (median over rounds) | range | "
                    "comm wait per rank | allocator peak MiB per rank | peak vs 1 process | "
                    "params + grads + AdamW vs 1 process |",
                    "|---|---:|---:|---:|---:|---:|---:|---:|"]
            out += model_rows(args, config, tmp)
            out.append("")
    out.append(END)
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("data_parallel", text)


main()
