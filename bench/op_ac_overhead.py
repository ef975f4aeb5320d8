"""What op AC costs against AC none, from steps paired inside one process.

Runs build/ac_paired (bench/ac_paired.cc) for llama3 debug, llama4 debug and
the wide model: two set-ups of the same model, AC none and selective op AC,
whose full training steps (forward, backward, clipping, AdamW) alternate on
the same batches. The slowdown is the median over pairs of the op step's
time over the none step's, minus 1, so the host's drift between runs (which
makes separate runs differ by up to 10 points here, see "AC modes side by
side") cancels. The recompute share is op AC's recompute FLOPs over the
model's FLOPs; issue 11 asks for slowdown <= share + 2 points.

Usage: /usr/bin/python3 bench/op_ac_overhead.py [--binary build/ac_paired]
           [--models llama3,llama4,wide] [--write]
"""
import argparse
import json
import os
import subprocess
import time

from benchmarks_file import machine, markers, replace_section

WIDE = ["--model.dim", "1024", "--model.n_layers", "8", "--model.n_heads", "16",
        "--model.n_kv_heads", "16", "--training.seq_len", "1024", "--training.local_batch_size", "2"]
# (row name, arguments, timed pairs). A pair's ratio scatters by about 8
# points (interquartile) on a shared host, so the debug models, at 0.3 s a
# step, take 100 pairs (the median's spread about a point, where 30 left
# runs 2-3 points apart); the wide model's steps take ~10 s.
MODELS = {
    "llama3": ("llama3 debug (batch 8 x seq 256)", ["--config", "configs/llama3_debug.toml"], 100),
    "llama4": ("llama4 debug (batch 8 x seq 256)", ["--config", "configs/llama4_debug.toml"], 100),
    "wide": ("wide (dim 1024, 8 layers, batch 2 x seq 1024)",
             ["--config", "configs/llama3_debug.toml", *WIDE], 10),
}


def measure(binary, args, pairs):
    out = subprocess.run([binary, *args, "--mode", "op", "--steps", str(pairs), "--warmup", "2",
                          "--training.threads", "2"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", default="build/ac_paired")
    parser.add_argument("--models", default="llama3,llama4,wide")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = []
    for key in args.models.split(","):
        name, model, pairs = MODELS[key]
        r = measure(args.binary, model, pairs)
        rows.append(f"| {name} | {r['none_step_s']:.3f} | {r['mode_step_s']:.3f} | "
                    f"{r['slowdown']:+.1%} ({r['slowdown_q1']:+.1%} to {r['slowdown_q3']:+.1%}) | "
                    f"{r['recompute_share']:.1%} | {r['excess_points']:+.1f} | {r['pairs']} |")
        print(rows[-1], flush=True)
    begin, end = markers("op_ac_overhead")
    body = "\n".join([
        begin,
        "## What op AC costs, steps paired in one process",
        "",
        f"Command: `/usr/bin/python3 bench/op_ac_overhead.py --write` on {machine()}, 2 cores, "
        f"2 threads, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, 1-minute load "
        f"average {load_before:.1f} at the start and {os.getloadavg()[0]:.1f} at the end. "
        "`build/ac_paired` holds AC none and selective op AC side by side in one process and "
        "alternates their full training steps (forward, backward, clipping, AdamW) on the same "
        "batches, after 2 warm-up pairs. Slowdown: the median over pairs of op's step time over "
        "none's, minus 1 (interquartile range in brackets). Recompute share: op AC's recompute "
        "FLOPs over the model's. Target (issue 11): excess <= +2 points.",
        "",
        "| model | none step s | op step s | op-AC slowdown | recompute share | excess (points) "
        "| pairs |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        end,
    ])
    if args.write:
        replace_section("op_ac_overhead", body)
    else:
        print(body)


main()
