"""`remat plan --maximize throughput` against the runs it predicts.

In each of --rounds rounds: calibrates op times afresh (a new cache file),
asks the planner for the best batch sizes within a memory limit, then trains
--choices choices (the first round's best, largest and smallest batch) with mode
"auto" (the fastest plan that fits memory.limit, measured cost model, same
cache), and compares each prediction with the steps that followed it. With --write,
replaces the "throughput_prediction" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/throughput_prediction.py [--remat build/remat]
       [--limit 300MiB] [--choices 3] [--steps 6] [--rounds 3] [--write]
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
MODEL = ["--config", "configs/llama3_debug.toml"]


def predict(args, common, cache):
    """A fresh calibration (a new cache file) and the planner's best choices."""
    if os.path.exists(cache):
        os.remove(cache)
    return json.loads(subprocess.run(
        [args.remat, "plan", *common, "--maximize", "throughput", "--json"],
        check=True, capture_output=True, text=True).stdout)


def measure(args, common, tmp, batch):
    """Per-step tokens/s and the peak of a run with mode "auto" at `batch`."""
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([args.remat, "train", *common, AC + "mode", "auto", AC + "cost_model",
                    "measured", "--training.local_batch_size", str(batch), "--training.steps",
                    str(args.steps + 2), "--metrics.log_freq", "1", "--metrics.jsonl_path",
                    metrics], check=True, capture_output=True)
    steps = [json.loads(l) for l in open(metrics)][2:]
    return [s["tps"] for s in steps], max(s["peak_bytes"] for s in steps)


def spread(ranked, n):
    """The best choice, the largest batch (the most recompute) and the
    smallest, then the next best: predictions held to the whole range."""
    picks = []
    for b in [ranked[0], max(ranked), min(ranked), *ranked]:
        if b not in picks and len(picks) < n:
            picks.append(b)
    return picks


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--limit", default="300MiB")
    parser.add_argument("--choices", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "times.json")
        common = [*MODEL, "--memory.limit", args.limit, "--job.dump_folder", tmp,
                  AC + "cost_cache", cache, "--training.threads", "2"]
        # The host's speed drifts by 10-15% over minutes (other tenants), so
        # every round calibrates afresh and its runs follow at once: each
        # prediction is held to the runs right after it, as "auto" would be.
        chosen = None
        rows = {}
        for r in range(args.rounds):
            plan = {c["local_batch_size"]: c for c in predict(args, common, cache)}
            if chosen is None:
                chosen = spread(list(plan), args.choices)
                rows = {b: {"predicted": [], "tps": [], "errors": [], "peak": 0,
                            "peak_predicted": plan[b]["peak_bytes"]} for b in chosen}
            for b in chosen:
                tps, peak = measure(args, common, tmp, b)
                row = rows[b]
                row["predicted"].append(plan[b]["tokens_per_second"])
                row["tps"] += tps
                row["errors"].append(plan[b]["tokens_per_second"] / statistics.median(tps) - 1)
                row["peak"] = max(row["peak"], peak)
                print(r, b, round(plan[b]["tokens_per_second"]), [round(t) for t in tps],
                      flush=True)
    begin, end = markers("throughput_prediction")
    out = [begin, "## Predicted against measured tokens/s (`remat plan --maximize throughput`)", "",
           f"Command: `/usr/bin/python3 bench/throughput_prediction.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {os.getloadavg()[0]:.1f} at the end. llama3 debug, seq 256, "
           f"memory.limit {args.limit}. {args.rounds} rounds; each round calibrates afresh (a new "
           "cache), asks the planner, then trains each choice with mode \"auto\" and the measured "
           f"cost model for {args.steps} steps after 2 warm-up steps. The error of a round is its "
           "prediction against the median of the steps that followed it (this host's speed "
           "drifts by 10-15% over minutes, so a prediction is held to the runs right after its "
           "calibration); the table gives the median error over rounds and the range. "
           "Predicted: the median over rounds; measured: median and upper decile (the rate 10% "
           "of steps beat) of every round's steps.", "",
           "| local_batch_size | predicted peak MiB | measured peak MiB | predicted tokens/s | "
           "measured median | measured upper decile | error (median over rounds) | range |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in chosen:
        row = rows[b]
        errors = sorted(row["errors"])
        out.append(f"| {b} | {row['peak_predicted'] / 2**20:,.2f} | {row['peak'] / 2**20:,.2f} | "
                   f"{statistics.median(row['predicted']):,.0f} | "
                   f"{statistics.median(row['tps']):,.0f} | "
                   f"{statistics.quantiles(row['tps'], n=10)[-1]:,.0f} | "
                   f"{100 * statistics.median(errors):+.1f}% | "
                   f"{100 * errors[0]:+.1f}% to {100 * errors[-1]:+.1f}% |")
    out += ["", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("throughput_prediction", text)


main()
