#!/usr/bin/env python3
"""The SwiGLU gate on 16 lanes (AVX-512) against 8 (AVX2) on this CPU:
build/swiglu_rates runs as the process chooses (16 lanes where the CPU has
AVX-512 F, BW and VL) and capped at AVX2 (REMAT_MAX_ISA=avx2
OPENBLAS_CORETYPE=Haswell), alternately over --rounds rounds, so a
disturbance from another tenant hits both alike. Per kernel: the median
over rounds of each run's median call, and their ratio. Both give the same
bits (tests/kernels/elementwise_test.cc), so this is all that differs.

Usage: /usr/bin/python3 bench/swiglu_lanes.py [--rounds 7] [--write]
(from the repo root, after `cmake --build build`)."""
import argparse
import os
import statistics
import subprocess
import time

from benchmarks_file import machine, markers, replace_section

CAPPED = {"REMAT_MAX_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell"}


def run(binary, env):
    """{(shape, kernel): microseconds} and the header line of one run."""
    out = subprocess.run([binary, "2"], check=True, capture_output=True, text=True,
                         env={**os.environ, **env}).stdout
    lines = out.splitlines()
    times = {}
    for line in lines[1:]:
        shape, _, kernel, micros = line.split("\t")
        times[(shape, kernel)] = float(micros)
    return lines[0], times


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: expected a positive number of rounds")
    return value


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/swiglu_rates")
    ap.add_argument("--rounds", type=positive, default=7)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    wide, narrow = {}, {}
    for _ in range(args.rounds):
        head, times = run(args.binary, {})
        for key, t in times.items():
            wide.setdefault(key, []).append(t)
        _, times = run(args.binary, CAPPED)
        for key, t in times.items():
            narrow.setdefault(key, []).append(t)
    if "capped" in head:
        raise SystemExit("this CPU runs the 8-lane gate already (no AVX-512 F, BW and VL, or "
                         "REMAT_MAX_ISA is set): nothing to compare")
    rows = []
    for shape, kernel in wide:
        w = statistics.median(wide[(shape, kernel)])
        n = statistics.median(narrow[(shape, kernel)])
        rows.append(f"| {shape} | {kernel} | {n:.0f} | {w:.0f} | {n / w:.2f}x |")
    begin, end = markers("swiglu_lanes")
    body = "\n".join([
        begin,
        "## The SwiGLU gate on 16 lanes against 8",
        "",
        f"Command: `/usr/bin/python3 bench/swiglu_lanes.py --write` on {machine()}, 2 cores, "
        f"2 threads, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 1-minute load "
        f"average {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end. "
        "`build/swiglu_rates` times each kernel at the debug models' shapes (median of 15 "
        "calls on the same operands), on 16 lanes and capped at 8 "
        "(`REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell`), alternately over "
        f"{args.rounds} rounds; the table gives the median over rounds. bf16: bf16 operands "
        "and output (the forward), fp32 gradients (the backward). Both lane counts give the "
        "same bits.",
        "",
        "| shape | kernel | 8 lanes us | 16 lanes us | 16 lanes speed-up |",
        "|---|---|---:|---:|---:|",
        *rows,
        "",
        end,
    ])
    if args.write:
        replace_section("swiglu_lanes", body)
    else:
        print(body)


main()
