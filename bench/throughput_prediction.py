"""`remat plan --maximize throughput` against the runs it predicts.

Calibrates op times afresh (a new cache file), asks the planner for the best
batch sizes within a memory limit, then trains each of the top --choices
choices with mode "auto" (the fastest plan that fits memory.limit, measured
cost model, same cache) over --rounds interleaved rounds, and compares the
predicted tokens/s with the measured median and upper decile. With --write,
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


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--limit", default="300MiB")
    parser.add_argument("--choices", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        common = [*MODEL, "--memory.limit", args.limit, "--job.dump_folder", tmp,
                  AC + "cost_cache", os.path.join(tmp, "times.json"), "--training.threads", "2"]
        choices = json.loads(subprocess.run(
            [args.remat, "plan", *common, "--maximize", "throughput", "--json"],
            check=True, capture_output=True, text=True).stdout)
        chosen = choices[:args.choices]
        tps = [[] for _ in chosen]
        peaks = [0 for _ in chosen]
        for _ in range(args.rounds):
            for i, c in enumerate(chosen):
                metrics = os.path.join(tmp, "m.jsonl")
                if os.path.exists(metrics):
                    os.remove(metrics)
                subprocess.run([args.remat, "train", *common, AC + "mode", "auto",
                                AC + "cost_model", "measured",
                                "--training.local_batch_size", str(c["local_batch_size"]),
                                "--training.steps", str(args.steps + 2), "--metrics.log_freq",
                                "1", "--metrics.jsonl_path", metrics],
                               check=True, capture_output=True)
                steps = [json.loads(l) for l in open(metrics)][2:]
                tps[i] += [s["tps"] for s in steps]
                peaks[i] = max(peaks[i], max(s["peak_bytes"] for s in steps))
                print(c["local_batch_size"], [round(s["tps"]) for s in steps], flush=True)
        for i, c in enumerate(chosen):
            rows.append((c, statistics.median(tps[i]), statistics.quantiles(tps[i], n=10)[-1],
                         peaks[i]))
    begin, end = markers("throughput_prediction")
    out = [begin, "## Predicted against measured tokens/s (`remat plan --maximize throughput`)", "",
           f"Command: `/usr/bin/python3 bench/throughput_prediction.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {os.getloadavg()[0]:.1f} at the end. llama3 debug, seq 256, "
           f"memory.limit {args.limit}; each choice trained with mode \"auto\" and the measured "
           f"cost model; {args.steps} steps after 2 warm-up steps x {args.rounds} interleaved "
           "rounds, their median and upper decile (the rate 10% of steps beat; other tenants of "
           "the host slow steps down, never up).", "",
           "| local_batch_size | predicted peak MiB | measured peak MiB | predicted tokens/s | "
           "measured median | error | measured upper decile | error |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c, median, top, peak in rows:
        predicted = c["tokens_per_second"]
        out.append(f"| {c['local_batch_size']} | {c['peak_bytes'] / 2**20:,.2f} | "
                   f"{peak / 2**20:,.2f} | {predicted:,.0f} | {median:,.0f} | "
                   f"{100 * (predicted / median - 1):+.1f}% | {top:,.0f} | "
                   f"{100 * (predicted / top - 1):+.1f}% |")
    out += ["", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("throughput_prediction", text)


main()
