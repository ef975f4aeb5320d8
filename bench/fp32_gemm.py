#!/usr/bin/env python3
"""OpenBLAS sgemm against oneDNN's f32 matmul inside remat's own fp32 linear
layers (build/fp32_gemm_libraries), on this CPU and capped at AVX2
(REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell: an AVX2-only machine
emulated): the measurement behind gemm_fp32's default (oneDNN where its f32
matmul is a brgemm kernel, else OpenBLAS), next to the measured FMA peak.

Usage: /usr/bin/python3 bench/fp32_gemm.py [--rounds N] [--write]
(from the repo root, after `cmake --build build`)."""
import argparse
import os
import subprocess
import time

from benchmarks_file import machine, markers, replace_section

CAPPED = {"REMAT_MAX_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell"}
# OpenBLAS picks its kernels from OPENBLAS_CORETYPE when set: some hosts
# set it (Haswell: AVX2 kernels) for every process. The native rows run
# without it, OpenBLAS's own choice for this CPU.
NATIVE = {"OPENBLAS_CORETYPE": None}


def run(binary, rounds, env):
    merged = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
    out = subprocess.run([binary, "2", str(rounds)], check=True, capture_output=True, text=True,
                         env=merged).stdout
    lines = out.splitlines()
    head = lines[0] if lines else ""
    mixes = [l for l in lines if "one step's GEMM mix" in l]
    return head, mixes, out


def peak(remat, env):
    """The fp32 peak remat's start-up line states for 2 threads under `env`."""
    train = subprocess.run(
        [remat, "train", "--config", "configs/llama3_debug.toml", "--training.steps", "1",
         "--training.threads", "2", "--validation.enabled", "false", "--job.dump_folder",
         "/tmp/remat_fp32_gemm_peak"], capture_output=True, text=True,
        env={k: v for k, v in {**os.environ, **env}.items() if v is not None})
    for line in train.stdout.splitlines() + train.stderr.splitlines():
        if line.startswith("device:") and "GFLOP/s" in line:
            return line.split("peak ", 1)[1].split(" GFLOP/s")[0] + " GFLOP/s"
    return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="build/fp32_gemm_libraries")
    ap.add_argument("--remat", default="build/remat")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    host_coretype = os.environ.get("OPENBLAS_CORETYPE")
    head, mixes, full = run(args.binary, args.rounds, NATIVE)
    host_rows = []
    if host_coretype:
        _, host_mixes, _ = run(args.binary, args.rounds, {})
        host_rows = [f"| this CPU, OPENBLAS_CORETYPE={host_coretype} (as this host sets it) {l}"
                     for l in host_mixes]
    head_capped, mixes_capped, _ = run(args.binary, args.rounds, CAPPED)
    peak_native, peak_capped = peak(args.remat, NATIVE), peak(args.remat, CAPPED)
    begin, end = markers("fp32_gemm")
    table = [l for l in full.splitlines() if l.startswith("|")]
    body = "\n".join([
        begin,
        "## fp32 GEMM: OpenBLAS sgemm against oneDNN's f32 matmul",
        "",
        f"Command: `/usr/bin/python3 bench/fp32_gemm.py --write` on {machine()}, 2 cores, "
        f"2 threads, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 1-minute load "
        f"average {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end. "
        "`build/fp32_gemm_libraries` runs remat's own fp32 linear layers (fixed row chunks, one "
        "single-threaded GEMM per chunk) on each implementation in interleaved rounds, "
        f"{args.rounds} rounds, median call. The AVX2 rows run with "
        "`REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell` (an AVX2-only machine emulated). "
        "remat's default follows this: oneDNN where its f32 matmul is a brgemm kernel, "
        "OpenBLAS elsewhere. The first rows run OpenBLAS with its own kernel choice for this "
        f"CPU (OPENBLAS_CORETYPE unset; this host's environment has "
        f"{'OPENBLAS_CORETYPE=' + host_coretype if host_coretype else 'none'}).",
        "",
        f"- this CPU: {head}; measured fp32 FMA peak {peak_native}",
        f"- capped at AVX2: {head_capped}; measured fp32 FMA peak {peak_capped}",
        "",
        "One step's GEMM mix (time and rate; speed-up = OpenBLAS time / oneDNN time):",
        "",
        "| ISA | model | | | OpenBLAS | oneDNN | oneDNN speed-up | |",
        "|---|---|---|---|---:|---:|---:|---|",
        *[f"| this CPU {l}" for l in mixes],
        *host_rows,
        *[f"| AVX2 {l}" for l in mixes_capped],
        "",
        "Per linear and pass on this CPU (OPENBLAS_CORETYPE unset):",
        "",
        *table,
        "",
        end,
    ])
    if args.write:
        replace_section("fp32_gemm", body)
    else:
        print(body)


main()
