"""Regenerates this CPU's benchmarks file, section by section, on the current tree.

Every section of BENCHMARKS.md (or of docs/benchmarks-zen4.md on a Zen 4,
see benchmarks_file.py) is written by its own script; this runs them one
after another, with the settings the sections were last measured with, so
a whole file can be brought up to date in one command on a quiet machine.
Each script states its own command, time and load average in its section;
this prints how long each took and the load average before it, and goes on
to the next section when one fails (listed at the end, exit status 1).

Sections that compare two builds (before_after, startup, steady_state) need
a "before" binary of the change they measure and are not run here; run
their scripts by hand (bench/README.md).

Usage: /usr/bin/python3 bench/regenerate.py [--sections a,b,...] [--list] [--dry-run]
"""
import argparse
import os
import subprocess
import sys
import time

from benchmarks_file import PATH, machine

PY = "/usr/bin/python3"  # Debian's: the one with torch and numpy
# In the order issue 11's measures come first (the longest-standing open
# points), then the memory and planner sections.
SECTIONS = [
    ("efficiency", ["bench/efficiency.py", "--rounds", "3", "--steps", "10", "--write"]),
    ("op_ac_overhead", ["bench/op_ac_overhead.py", "--write"]),
    ("work_stealing", ["bench/work_stealing.py", "--write"]),
    ("bf16_speed", ["bench/bf16_speed.py", "--write"]),
    ("fp32_gemm", ["bench/fp32_gemm.py", "--write"]),
    ("op_breakdown", ["bench/op_breakdown.py", "--write"]),
    ("compare_pytorch", ["bench/compare_pytorch.py", "--remat", "build/remat"]),
    ("swiglu_lanes", ["bench/swiglu_lanes.py", "--write"]),
    ("ac_modes", ["bench/ac_modes.py", "--write"]),
    ("plan_cost", ["bench/plan_cost.py", "--write"]),
    ("budget_vs_fixed", ["bench/budget_vs_fixed.py", "--write"]),
    ("pareto_measured", ["bench/pareto_measured.py", "--write"]),
    ("throughput_prediction", ["bench/throughput_prediction.py", "--write"]),
    ("gradient_accumulation", ["bench/gradient_accumulation.py", "--write"]),
    ("chunked_loss", ["bench/chunked_loss.py", "--write"]),
    ("data_parallel", ["bench/data_parallel.py", "--write"]),
]
# The binaries the scripts run, built before the first one starts.
TARGETS = ["remat", "ac_paired", "fp32_gemm_libraries", "bf16_gemm_libraries", "gemm_rates",
           "swiglu_rates"]


def chosen(names):
    known = [name for name, _ in SECTIONS]
    if not names:
        return SECTIONS
    wanted = names.split(",")
    unknown = [n for n in wanted if n not in known]
    if unknown:
        print(f"--sections: unknown {', '.join(unknown)}; expected some of {', '.join(known)}",
              file=sys.stderr)
        sys.exit(2)
    return [s for s in SECTIONS if s[0] in wanted]


def tree_state():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip() or "?"
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "CMakeLists.txt"],
                           capture_output=True, text=True).stdout.strip()
    return head + (" with uncommitted engine changes" if dirty else "")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sections", help="comma-separated section names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the sections and stop")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and stop")
    args = parser.parse_args()
    sections = chosen(args.sections)
    if args.list or args.dry_run:
        for name, command in sections:
            print(f"{name:24s} " + (" ".join([PY, *command]) if args.dry_run else ""))
        print(f"writes {PATH}")
        return
    print(f"{machine()}; tree {tree_state()}; writes {PATH}", flush=True)
    if subprocess.run(["ninja", "-C", "build", *TARGETS]).returncode != 0:
        print("regenerate: the build failed (expected `make build` to have configured build/)",
              file=sys.stderr)
        sys.exit(2)
    done, failed = [], []
    for name, command in sections:
        load = os.getloadavg()[0]
        print(f"== {name}: load average {load:.1f}; {' '.join([PY, *command])}", flush=True)
        start = time.time()
        rc = subprocess.run([PY, *command]).returncode
        minutes = (time.time() - start) / 60
        (done if rc == 0 else failed).append(f"{name} ({minutes:.1f} min, load {load:.1f} "
                                             f"before{'' if rc == 0 else f', exit {rc}'})")
    print("written: " + ("; ".join(done) or "none"))
    if failed:
        print("failed: " + "; ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
