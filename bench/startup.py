"""How long a run takes to start: two builds of remat side by side.

Times `remat train --training.steps 1` at batch 2 x seq 64 (a step costs a few
milliseconds there, so the wall time is start-up: the config, the plan, the
initial weights, the first touch of every buffer) for a "before" and an
"after" binary, interleaved over --rounds rounds (each pair in the other
order from the last) so that a disturbance hits both alike. Reports each one's median wall time, CPU time (user + system)
and minor page faults from wait4(2), and the ratios. With --write, replaces
the "startup" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/startup.py --before OLD/remat [--after build/remat]
       [--label TEXT] [--rounds 5] [--write]
"""
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import machine, markers, replace_section, two_build_arguments

MODELS = {
    "llama3 debug (6.2M parameters)": "configs/llama3_debug.toml",
    "llama4 debug (15.0M parameters)": "configs/llama4_debug.toml",
}


def run_once(remat, config, tmp):
    """Wall seconds, CPU seconds and minor faults of one 1-step run."""
    start = time.monotonic()
    proc = subprocess.Popen([remat, "train", "--config", config, "--training.steps", "1",
                             "--training.local_batch_size", "2", "--training.seq_len", "64",
                             "--training.threads", "2", "--metrics.peak_flops", "1e11",
                             "--job.dump_folder", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read().decode()
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{remat} failed: {err[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_minflt


def main():
    parser = two_build_arguments(rounds=5)
    args = parser.parse_args()
    begin, end = markers("startup")
    load = os.getloadavg()[0]
    label = f' --label "{args.label}"' if args.label else ""
    out = [begin, f"## Start-up{': ' + args.label if args.label else ''}", "",
           f"Command: `/usr/bin/python3 bench/startup.py --before {args.before} --after "
           f"{args.after}{label} --write` on {machine()}, {os.cpu_count()} cores, 2 threads, "
           f"{time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute load average {load:.1f} at the "
           f"start. `remat train --training.steps 1` at batch 2 x seq 64; medians over "
           f"{args.rounds} interleaved rounds (the order alternating) of wall time, CPU time (user + system) and minor "
           "page faults, from wait4(2).", "",
           "| model | before wall (s) | after wall (s) | after / before | before CPU (s) | "
           "after CPU (s) | before faults | after faults |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, config in MODELS.items():
            runs = {"before": [], "after": []}
            for r in range(args.rounds):
                # Which build goes first alternates: the first run of a pair
                # measured up to 12% slower than the second with the same
                # binary on both sides.
                for which in ("before", "after") if r % 2 == 0 else ("after", "before"):
                    runs[which].append(run_once(getattr(args, which), config, tmp))
            med = {w: [statistics.median(r[i] for r in runs[w]) for i in range(3)]
                   for w in runs}
            b, a = med["before"], med["after"]
            out.append(f"| {name} | {b[0]:.2f} | {a[0]:.2f} | {a[0] / b[0]:.2f} | {b[1]:.2f} | "
                       f"{a[1]:.2f} | {b[2]:,.0f} | {a[2]:,.0f} |")
    out.append(end)
    body = "\n".join(out)
    print(body)
    if args.write:
        replace_section("startup", body)


if __name__ == "__main__":
    main()
