"""The threads' schedule with and without work stealing, on a quiet machine
and beside a busy neighbour.

The kernels share fixed items (GEMM row chunks, attention work items) among
the threads as contiguous runs; with stealing (the default,
REMAT_WORK_STEALING unset) a thread done with its run takes items from the
end of the other's, with REMAT_WORK_STEALING=0 each keeps to its own run. A
process busy on one core (a neighbour) slows one thread: without stealing
every op then waits for it. This trains llama3 and llama4 debug (AC none,
batch 8 x seq 256, 2 threads) with each setting in turn inside every round,
first alone, then with a busy loop pinned to CPU 1 (`taskset -c 1`) for the
whole round, and prints median and upper-decile tokens/s, and the ratio of
the medians (stealing over none). Bits do not change: an item is the same
arithmetic whichever thread runs it (tests/kernels/threads_test.cc).

Usage: /usr/bin/python3 bench/work_stealing.py [--remat build/remat] [--rounds 3]
           [--steps 8] [--write]
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import machine, markers, replace_section
from efficiency import MODELS, NONE, train, upper_decile

SETTINGS = {"stealing": "1", "no stealing": "0"}
BUSY = ["taskset", "-c", "1", "/usr/bin/python3", "-c", "while True: pass"]


def measure(remat, model, rounds, steps, tmp, neighbour):
    tps = {name: [] for name in SETTINGS}
    for _ in range(rounds):
        busy = subprocess.Popen(BUSY) if neighbour else None
        try:
            for name, value in SETTINGS.items():
                tps[name].extend(train(remat, model, NONE, steps, tmp,
                                       {"REMAT_WORK_STEALING": value})[0])
        finally:
            if busy:
                busy.kill()
                busy.wait()
    return tps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    lines = ["| model | neighbour | tokens/s with stealing (median / p90) | without (median / p90) "
             "| median ratio |", "|---|---|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for key in ("llama3", "llama4"):
            name, model, _ = MODELS[key]
            for neighbour in (False, True):
                tps = measure(args.remat, model, args.rounds, args.steps, tmp, neighbour)
                on, off = tps["stealing"], tps["no stealing"]
                ratio = statistics.median(on) / statistics.median(off)
                row = (f"| {name} | {'busy loop on CPU 1' if neighbour else 'none'} | "
                       f"{statistics.median(on):,.0f} / {upper_decile(on):,.0f} | "
                       f"{statistics.median(off):,.0f} / {upper_decile(off):,.0f} | "
                       f"{ratio:.2f}x |")
                print(row, flush=True)
                lines.append(row)
    load_after = os.getloadavg()[0]
    head = (f"Command: `/usr/bin/python3 bench/work_stealing.py --rounds {args.rounds} --steps "
            f"{args.steps}{' --write' if args.write else ''}` on {machine()}, 2 threads, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 1-minute load average "
            f"{load_before:.1f} at the start and {load_after:.1f} at the end. AC none, "
            f"{args.rounds} rounds of {args.steps} timed steps per setting, the settings in turn "
            "inside every round; a neighbour is `taskset -c 1 python3 -c 'while True: pass'`, "
            "running through the whole round.")
    print(head)
    if args.write:
        begin, end = markers("work_stealing")
        replace_section("work_stealing", "\n".join([
            begin, "## Work stealing: the threads' schedule beside a busy neighbour", "", head,
            "", *lines, "", end]))


if __name__ == "__main__":
    main()
