"""What `remat plan` costs: wall time and peak memory per flavor.

Runs `build/remat plan --config C` (the table, every AC mode compared) five
times per config in configs/, and reports the median wall time and the peak
RSS of the process. Prints a markdown table; with --write, replaces the
"plan cost" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/plan_cost.py [--remat build/remat] [--write]
"""
import argparse
import glob
import os
import platform
import resource
import statistics
import subprocess
import time

from benchmarks_file import markers, replace_section

BEGIN, END = markers("plan_cost")


def measure(remat, config):
    times, rss = [], 0
    for _ in range(5):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.execv(remat, [remat, "plan", "--config", config])
        _, status, usage = os.wait4(pid, 0)
        times.append(time.perf_counter() - start)
        if status != 0:
            raise SystemExit(f"remat plan --config {config} failed")
        rss = max(rss, usage.ru_maxrss)
    return statistics.median(times), rss / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), platform.processor())
    lines = [BEGIN, "## Plan cost: `remat plan` at real sizes", "",
             f"Command: `/usr/bin/python3 bench/plan_cost.py --write` on {cpu}, "
             f"{os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}. Median of 5 runs of "
             "`remat plan --config C` (six AC modes predicted), peak RSS of the process.", "",
             "| config | wall time (s) | peak RSS (MiB) |", "|---|---|---|"]
    for config in sorted(glob.glob("configs/*.toml")):
        seconds, mib = measure(args.remat, config)
        lines.append(f"| {config} | {seconds:.3f} | {mib:.1f} |")
    lines.append(END)
    table = "\n".join(lines)
    print(table)
    if args.write:
        replace_section("plan_cost", table)

main()
